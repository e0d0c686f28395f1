"""Gateway keys: created (shown once), revoked (at once, in every process), and the record
the hot path checks (apps/gateway/store.py), built from the database.

A key is 256 random bits (``spg_…``), stored as its SHA-256 digest: a fast digest is
enough, there is nothing to brute-force that a slow hash would protect. A key acts as its
user: their role (the gateway needs the "use the chat" capability, which members have),
their limits (apps/gateway/limits.py), at the time of the request — a change of role or
limits bumps the records' generation, so every record is read again. A key may also have
limits of its own (an admin's, or lower ones its owner chose at its creation): a request
through it must pass both the key's and the user's.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.roles import USE_CHAT
from apps.audit import services as audit
from apps.core.redisconn import RedisError
from apps.gateway import store
from apps.gateway.limits import FIELDS as LIMIT_FIELDS
from apps.gateway.limits import limits_for, own_limits
from apps.gateway.models import GatewayKey

PREFIX = "spg_"
KEY_MAX_CHARS = 200


def digest(clear: str) -> str:
    return hashlib.sha256(clear.encode()).hexdigest()


def looks_like_key(clear: str | None) -> bool:
    return bool(clear) and clear.startswith(PREFIX) and len(clear) <= KEY_MAX_CHARS


class TooManyKeys(ValueError):
    """The user holds GATEWAY_KEYS_PER_USER_MAX keys already (the form and the API say so)."""


def keys_held(user) -> int:
    """The user's keys that still work: not revoked, not expired."""
    return (
        GatewayKey.objects.live()
        .filter(user=user)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .count()
    )


def key_create(
    *,
    user,
    name: str,
    models: list[str] | None = None,
    expires_at: datetime | None = None,
    limits: dict | None = None,
) -> tuple[GatewayKey, str]:
    """A new key for `user`; returns the row and the clear key (shown once, never stored).
    `limits`: the key's own ({field: value or None}, apps/gateway/limits.py::FIELDS).
    Raises TooManyKeys past GATEWAY_KEYS_PER_USER_MAX: every key is a way in that must be
    tracked and revoked, and nothing else bounds how many a script could make."""
    limit = settings.GATEWAY_KEYS_PER_USER_MAX
    if keys_held(user) >= limit:
        raise TooManyKeys(f"At most {limit} gateway keys each: revoke one you no longer use first.")
    clear = PREFIX + secrets.token_urlsafe(32)
    key = GatewayKey.objects.create(
        user=user,
        name=name.strip()[:100] or "key",
        prefix=clear[:12],
        digest=digest(clear),
        model_names=sorted(set(models or [])),
        expires_at=expires_at,
        **{name: (limits or {}).get(name) for name in LIMIT_FIELDS},
    )
    audit.record(
        "key.create", key, user=user, label=f"{user} · {key.name}",
        after={"name": key.name, "prefix": key.prefix, "models": key.model_names,
               "expires_at": expires_at.isoformat() if expires_at else None,
               **_limit_values(key)},
    )  # fmt: skip
    return key, clear


def _limit_values(key: GatewayKey) -> dict:
    return {name: getattr(key, name) for name in LIMIT_FIELDS}


def key_set_limits(*, key: GatewayKey, values: dict) -> bool:
    """An admin sets a key's own limits (every field of LIMIT_FIELDS; None: none of that
    kind). One audit row with who acted; every gateway re-reads its records at their next
    request (the generation is bumped after the commit). False when nothing changed."""
    before = _limit_values(key)
    after = {name: values[name] for name in LIMIT_FIELDS}
    if before == after:
        return False
    for name, value in after.items():
        setattr(key, name, value)
    key.save(update_fields=list(LIMIT_FIELDS))
    audit.record("key.limits", key, label=f"{key.user} · {key.name}", before=before,
                 after=after)  # fmt: skip
    transaction.on_commit(lambda: store.bump(store.GEN))
    return True


def key_revoke(*, key: GatewayKey) -> GatewayKey:
    """Revoked in the database and tombstoned in Redis: the next request with it is a 401,
    whichever gateway process it reaches."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit.record("key.revoke", key, label=f"{key.user} · {key.name}")
    store.tombstone(key.digest)
    return key


def keys_revoke_all(*, user) -> int:
    """Every key of `user` not revoked yet, revoked through key_revoke (audited and
    tombstoned: each fails at its next request in every process). A key Redis could not
    tombstone is still revoked in the database; the others are revoked all the same, and
    RedisError says how many may work a few minutes more."""
    keys = list(GatewayKey.objects.live().filter(user=user))
    untombstoned = 0
    for key in keys:
        try:
            key_revoke(key=key)
        except RedisError:
            untombstoned += 1
    if untombstoned:
        raise RedisError(
            f"{untombstoned} gateway key(s) revoked in the database, but Redis did not answer: "
            "running gateways may accept them for a few minutes more"
        )
    return len(keys)


def on_revoke_credentials(sender, user, **kwargs) -> str:
    """apps.accounts.signals.revoke_credentials: the user's keys, on a password change."""
    count = keys_revoke_all(user=user)
    return f"{count} gateway key{'s' if count != 1 else ''}" if count else ""


def record_for(digest_hex: str) -> tuple[dict | None, bool]:
    """The hot path's record for a key digest, from the database: (record, revoked).
    (None, False) for a key nobody has."""
    key = GatewayKey.objects.select_related("user").filter(digest=digest_hex).first()
    if key is None:
        return None, False
    if key.revoked_at is not None:
        return None, True
    record: dict = {"k": key.pk, **_user_record(key.user)}
    if key.model_names:
        record["m"] = list(key.model_names)
    if key.expires_at is not None:
        record["x"] = int(key.expires_at.timestamp() * 1000)
    _put_limits(record, own_limits(key), prefix="k")
    return record, False


def record_for_user(user_id: int) -> dict:
    """The record the chat is admitted by (apps/gateway/chat_budget.py): the user's own,
    as their keys have it but with no key, model allowlist or expiry. A user who is gone
    may use nothing."""
    user = get_user_model().objects.filter(pk=user_id).first()
    if user is None:
        return {"u": user_id, "g": store.generation(), "use": False}
    return _user_record(user)


def _user_record(user) -> dict:
    """What a record holds of its user: who, may they use the models, their limits. The
    generation is read before the limits (a change after it bumps it: read again)."""
    record: dict = {
        "u": user.pk,
        "g": store.generation(),
        "use": bool(user.is_active and user.has_perm(USE_CHAT)),
    }
    _put_limits(record, limits_for(user))
    return record


def _put_limits(record: dict, limits, prefix: str = "") -> None:
    """The record's limit fields (the user's, or with prefix "k" the key's own): only those
    set, since the admission script takes any field present for a limit."""
    for field, value in (("rpm", limits.rpm), ("conc", limits.concurrent), ("tpd", limits.tpd)):
        if value is not None:
            record[prefix + field] = value
