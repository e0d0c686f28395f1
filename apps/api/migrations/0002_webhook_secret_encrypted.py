"""Webhook secrets encrypted at rest (issue 17): the column becomes an EncryptedTextField
and every clear secret already stored is encrypted with the configured key (going back
decrypts them again)."""

from django.db import migrations

from apps.api.crypto import FieldCipher, recrypt_column
from apps.api.models import EncryptedTextField, field_cipher


def _recrypt(schema_editor, transform) -> None:
    quote = schema_editor.connection.ops.quote_name
    with schema_editor.connection.cursor() as cursor:
        recrypt_column(cursor, quote("api_webhook"), quote("secret"), transform)


def encrypt_existing(apps, schema_editor) -> None:
    cipher = field_cipher()
    _recrypt(schema_editor, lambda v: v if FieldCipher.is_encrypted(v) else cipher.encrypt(v))


def decrypt_existing(apps, schema_editor) -> None:
    cipher = field_cipher()
    _recrypt(schema_editor, lambda v: cipher.decrypt(v) if FieldCipher.is_encrypted(v) else v)


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0001_initial"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhook",
            name="secret",
            field=EncryptedTextField(),
        ),
        migrations.RunPython(encrypt_existing, decrypt_existing, elidable=False),
    ]
