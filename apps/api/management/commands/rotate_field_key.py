"""`manage.py rotate_field_key`: re-encrypt every webhook secret with the first key of
FIELD_ENCRYPTION_KEY (a rotation: put the new key first, keep the old one after it, run
this, then drop the old key). Prints how many secrets it re-encrypted; a secret that no
configured key opens is an error (nothing is changed)."""

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from apps.api.crypto import UndecryptableError, recrypt_column
from apps.api.models import Webhook, field_cipher


class Command(BaseCommand):
    help = "Re-encrypt the stored webhook secrets with the first FIELD_ENCRYPTION_KEY."

    def handle(self, *args, **options):
        cipher = field_cipher()
        quote = connection.ops.quote_name
        table = quote(Webhook._meta.db_table)
        column = quote(Webhook._meta.get_field("secret").column)
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                count = recrypt_column(cursor, table, column, cipher.rotate)
        except UndecryptableError as exc:
            raise CommandError(f"{exc}: keep the old key in FIELD_ENCRYPTION_KEY") from None
        self.stdout.write(f"re-encrypted {count} webhook secret(s)")
