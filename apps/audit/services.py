"""Recording audit rows: `record(action, target, ...)`, and the snapshots and diffs that
give a row its before, after and changes. Never raises into the action it records: a row
that cannot be written is logged (the action itself already happened)."""

from __future__ import annotations

import datetime
import decimal
import logging
from typing import Any

from django.db import models, transaction

from apps.audit.context import Actor, current
from apps.audit.models import AuditEntry

log = logging.getLogger("sparkpanel.audit")

# Never copied into a row, whatever the model: the rows are readable by every admin.
SECRET_FIELDS = {"password", "digest", "secret", "token", "api_key", "key_hash"}
MAX_TEXT = 2000  # a long text field (a recipe's notes, a YAML blob) is cut in the row


def _plain(value: Any) -> Any:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return value[:MAX_TEXT] + "…"
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def snapshot(instance: models.Model, fields: list[str] | None = None) -> dict:
    """The model's own (concrete, non-secret) field values, JSON-ready; foreign keys as
    their ids."""
    out = {}
    for field in instance._meta.concrete_fields:
        name = field.attname
        if name in SECRET_FIELDS or field.name in SECRET_FIELDS:
            continue
        if fields is not None and field.name not in fields and name not in fields:
            continue
        out[field.name] = _plain(getattr(instance, name))
    return out


def diff(before: dict | None, after: dict | None) -> dict:
    """{field: [before, after]} for the fields that differ."""
    before, after = before or {}, after or {}
    return {
        key: [before.get(key), after.get(key)]
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }


def record(
    action: str,
    target: models.Model | None = None,
    *,
    target_type: str = "",
    target_id: str = "",
    label: str = "",
    before: dict | None = None,
    after: dict | None = None,
    message: str = "",
    actor: Actor | None = None,
    user=None,
) -> AuditEntry | None:
    """One row for one action. `user` overrides the request's (a service knows who asked);
    `actor` replaces the whole context (the watchdog, a worker)."""
    who = actor or current()
    if user is not None:
        who = Actor(user=user, address=who.address, source=who.source)
    if target is not None:
        target_type = target_type or target._meta.model_name
        target_id = target_id or str(target.pk)
        label = label or str(target)
    user_obj = who.user if getattr(who.user, "pk", None) is not None else None
    entry = AuditEntry(
        actor=user_obj,
        actor_name=getattr(user_obj, "username", "") if user_obj else who.name,
        source=who.source,
        address=who.address,
        action=action,
        target_type=target_type[:40],
        target_id=str(target_id)[:40],
        target=label[:200],
        message=message[:500],
        before=before,
        after=after,
        changes=diff(before, after) if before is not None and after is not None else {},
    )

    try:
        # In the action's own transaction (a rolled-back action leaves no row), inside a
        # savepoint so that a failed write cannot break the action.
        with transaction.atomic():
            entry.save()
    except Exception:  # the action happened; a lost row is logged, never raised
        log.exception("could not write the audit row for %s %s", action, label)
        return None
    return entry
