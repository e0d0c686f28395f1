from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import Role
from apps.accounts.services import user_set_role
from apps.audit import context as audit_context


class Command(BaseCommand):
    help = "Give an existing user exactly one role (admin, operator or member)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("role", choices=[r.value for r in Role])

    def handle(self, *args, username, role, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
        with audit_context.command_line("setrole"):
            user_set_role(user=user, role=Role(role))
        self.stdout.write(self.style.SUCCESS(f"{username!r} is now {role}."))
