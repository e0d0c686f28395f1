import sys

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.audit import context as audit_context


class Command(BaseCommand):
    help = (
        "Create a SparkPanel user with a role (admin, operator or member). Without "
        "--password-stdin a random password is generated and printed once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=[r.value for r in Role])
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="read the password from standard input (keeps it out of shell history)",
        )

    def handle(self, *args, username, role, email, password_stdin, **options):
        password = sys.stdin.readline().rstrip("\n") if password_stdin else None
        try:
            with audit_context.command_line("createuser"):
                user, clear = user_create(
                    username=username, role=Role(role), password=password, email=email
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError("password rejected: " + " ".join(exc.messages)) from exc
        self.stdout.write(self.style.SUCCESS(f"Created {role} {user.username!r}."))
        if password is None:
            self.stdout.write(f"Password (shown once): {clear}")
