"""Creating, checking and revoking personal API tokens (stored as SHA-256 digests).

Tokens are 256 random bits, so a plain (fast) digest is enough: there is nothing to
brute-force that a slow password hash would protect.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.utils import timezone

from apps.api.models import ApiToken
from apps.audit import services as audit

PREFIX = "spk_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(clear: str) -> str:
    return hashlib.sha256(clear.encode()).hexdigest()


def token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the clear token (shown once, never
    stored)."""
    clear = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name.strip()[:100] or "token", prefix=clear[:12], digest=digest(clear)
    )
    audit.record("token.create", token, user=user, label=f"{user} · {token.name}",
                 after={"name": token.name, "prefix": token.prefix})  # fmt: skip
    return token, clear


def token_revoke(*, token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit.record("token.revoke", token, label=f"{token.user} · {token.name}")
    return token


def tokens_revoke_all(*, user) -> int:
    """Every token of `user` that still works, revoked (each with its audit row)."""
    tokens = list(ApiToken.objects.live().filter(user=user))
    for token in tokens:
        token_revoke(token=token)
    return len(tokens)


def on_revoke_credentials(sender, user, **kwargs) -> str:
    """apps.accounts.signals.revoke_credentials: the user's tokens, on a password change."""
    count = tokens_revoke_all(user=user)
    return f"{count} API token{'s' if count != 1 else ''}" if count else ""


def token_user(clear: str):
    """The active user a clear token belongs to, or None (unknown, revoked, user
    deactivated)."""
    if not clear.startswith(PREFIX) or len(clear) > 200:
        return None
    token = ApiToken.objects.live().select_related("user").filter(digest=digest(clear)).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
