"""Open sockets follow the account that opened them.

A WebSocket is authorised once, when it opens (apps/core/consumers.py `PanelSocket`); this
module tells the open ones when that decision may no longer hold. Every socket of a
signed-in user is a member of two channel-layer groups:

- `account-<user id>`: any change that can take access away — the account deactivated or
  deleted, its password changed, its role groups or permissions changed, superuser/staff
  flags changed — sends `account.changed`. Each socket then re-checks, from the database,
  its own session (still there, not expired, same password hash, account active) and the
  capability it was opened with, and closes with 4401 (no longer signed in) or 4403 (no
  longer allowed) — so a promotion or an unrelated edit leaves sockets open.
- `session-<hash of the session key>`: signing out sends `session.revoke`, which closes the
  sockets of that one browser session with 4401; the same user's other browsers stay open.

Messages are sent after the transaction commits (the re-check must see the new state) and
best effort: when Redis is unreachable one warning line is logged, and each socket also
re-checks by itself on its periodic group refresh, which is what covers changes made
without signals (a queryset `update()`, an expired or deleted session row).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import user_logged_out
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

log = logging.getLogger(__name__)

ACCOUNT_CHANGED = "account.changed"
SESSION_REVOKE = "session.revoke"

# Saves that touch only other fields (login's last_login) need no re-check.
ACCESS_FIELDS = frozenset({"password", "is_active", "is_superuser", "is_staff"})


def account_group(user_id: int) -> str:
    return f"account-{user_id}"


def session_group(session_key: str) -> str:
    """The session key itself is a credential: only a hash of it goes to Redis."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:48]


def _send(groups: list[str], message: dict) -> None:
    async def send_all() -> None:
        layer = get_channel_layer()
        for group in groups:
            await layer.group_send(group, message)

    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            async_to_sync(send_all)()
        else:  # called from a thread that runs a loop (a Playwright test): not on it
            with ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(async_to_sync(send_all)).result()
    except Exception as exc:  # Redis down: the sockets' own periodic re-check catches up
        log.warning(
            "could not tell the open sockets of %s to re-check their access (%s: %s)",
            ", ".join(groups),
            type(exc).__name__,
            exc,
        )


def accounts_changed(user_ids) -> None:
    """Tell the open sockets of these users to re-check their access, after commit."""
    ids = sorted({int(pk) for pk in user_ids if pk is not None})
    if ids:
        groups = [account_group(pk) for pk in ids]
        transaction.on_commit(lambda: _send(groups, {"type": ACCOUNT_CHANGED}))


def session_revoked(session_key: str | None) -> None:
    """Close the open sockets of one browser session (its sign-out)."""
    if session_key:
        _send([session_group(session_key)], {"type": SESSION_REVOKE})


# --- signal receivers ---------------------------------------------------------------------


def _on_logged_out(sender, request, user, **kwargs) -> None:
    session = getattr(request, "session", None)
    session_revoked(getattr(session, "session_key", None))


def _on_user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created:
        return
    if update_fields is not None and not (ACCESS_FIELDS & set(update_fields)):
        return
    accounts_changed([instance.pk])


def _on_user_deleted(sender, instance, **kwargs) -> None:
    accounts_changed([instance.pk])


def _on_user_m2m(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """User.groups / User.user_permissions, changed from either side."""
    if action in ("post_add", "post_remove") and not pk_set:
        return
    if not reverse:
        if action in ("post_add", "post_remove", "post_clear"):
            accounts_changed([instance.pk])
        return
    # From the group's (or permission's) side: pk_set holds user ids; a clear has none,
    # so the members are read before it.
    if action == "pre_clear":
        instance._revoke_user_ids = list(instance.user_set.values_list("pk", flat=True))
    elif action == "post_clear":
        accounts_changed(getattr(instance, "_revoke_user_ids", []))
    elif action in ("post_add", "post_remove"):
        accounts_changed(pk_set or ())


def _on_group_permissions(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """A group's permissions changed (from either side): every member re-checks."""
    if action in ("post_add", "post_remove") and not pk_set:
        return
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    if reverse:  # instance is a Permission, pk_set group ids
        members = users.filter(groups__in=pk_set or ())
        everyone = users.filter(groups__permissions=instance)
    else:  # instance is a Group
        members = everyone = users.filter(groups=instance)
    if action == "pre_clear":
        instance._revoke_user_ids = list(everyone.values_list("pk", flat=True))
    elif action == "post_clear":
        accounts_changed(getattr(instance, "_revoke_user_ids", []))
    elif action in ("post_add", "post_remove"):
        accounts_changed(members.values_list("pk", flat=True))


def connect() -> None:
    """Called from AccountsConfig.ready()."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    uid = "accounts.revoke"
    user_logged_out.connect(_on_logged_out, dispatch_uid=f"{uid}.logout")
    post_save.connect(_on_user_saved, sender=user_model, dispatch_uid=f"{uid}.save")
    post_delete.connect(_on_user_deleted, sender=user_model, dispatch_uid=f"{uid}.delete")
    for through in (user_model.groups.through, user_model.user_permissions.through):
        m2m_changed.connect(_on_user_m2m, sender=through, dispatch_uid=f"{uid}.{through.__name__}")
    m2m_changed.connect(
        _on_group_permissions, sender=Group.permissions.through, dispatch_uid=f"{uid}.group_perms"
    )
