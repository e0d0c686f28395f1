"""`manage.py apitoken USERNAME --name NAME`: a personal API token for a user, from the panel
machine (bootstrapping CI: `TOKEN=$(python manage.py apitoken ci --name nightly)`).

Only the clear token goes to stdout (shown once, never stored); `--list` and `--revoke PREFIX`
manage the user's tokens.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.accounts.services import user_role
from apps.api.models import ApiToken
from apps.api.tokens import PREFIX, token_create, token_revoke


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else "–"


class Command(BaseCommand):
    help = (
        "Create a personal API token for USERNAME (printed alone on stdout), list the user's "
        "tokens (--list) or revoke one (--revoke PREFIX)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        action = parser.add_mutually_exclusive_group(required=True)
        action.add_argument("--name", help="what the new token is for, e.g. “nightly CI”")
        action.add_argument(
            "--list", action="store_true", dest="list_tokens", help="list the user's tokens"
        )
        action.add_argument(
            "--revoke", metavar="PREFIX", help="revoke the token starting with PREFIX (spk_…)"
        )

    def handle(self, *args, username, name, list_tokens, revoke, **options):
        users = get_user_model().objects
        try:
            user = users.get(**{users.model.USERNAME_FIELD: username})
        except users.model.DoesNotExist:
            raise CommandError(f"no user {username!r}") from None
        if list_tokens:
            return self._list(user)
        if revoke is not None:
            return self._revoke(user, revoke)
        if not name.strip():
            raise CommandError("--name must not be empty")
        if not user.is_active:
            raise CommandError(f"{username!r} is deactivated: its tokens would not work")
        if user_role(user) is None:
            self.stderr.write(
                f"warning: {username!r} has no role yet, so the token is refused everything "
                f"(manage.py setrole {username} member)"
            )
        token, clear = token_create(user=user, name=name)
        self.stderr.write(f"Created token {token.name!r} ({token.prefix}…) for {username!r}.")
        self.stdout.write(clear)

    def _list(self, user) -> None:
        tokens = ApiToken.objects.filter(user=user).order_by("-created_at")
        if not tokens:
            self.stdout.write(f"{user.get_username()!r} has no API tokens.")
            return
        rows = [
            [t.name, t.prefix + "…", _when(t.created_at), _when(t.last_used_at),
             _when(t.revoked_at) if t.revoked else "no"]
            for t in tokens
        ]  # fmt: skip
        header = ["name", "prefix", "created", "last used", "revoked"]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )

    def _revoke(self, user, value: str) -> None:
        value = value.strip().rstrip("…")
        if not value.startswith(PREFIX) or len(value) <= len(PREFIX):
            raise CommandError(f"give the token's prefix as --list shows it ({PREFIX}…)")
        matches = [t for t in ApiToken.objects.filter(user=user) if t.prefix.startswith(value[:12])]
        if not matches:
            raise CommandError(f"{user.get_username()!r} has no token starting with {value!r}")
        live = [t for t in matches if not t.revoked]
        if not live:
            self.stdout.write(
                f"Token {matches[0].name!r} ({matches[0].prefix}…) was already revoked."
            )
            return
        if len(live) > 1:
            names = ", ".join(f"{t.name!r} ({t.prefix}…)" for t in live)
            raise CommandError(f"{value!r} matches several tokens: {names}; give more of it")
        token = token_revoke(token=live[0])
        self.stdout.write(
            f"Revoked token {token.name!r} ({token.prefix}…): it stops working at once."
        )
