"""Audit rows for the configuration models, from their save and delete signals: recipes,
hosts, pairs of Sparks and benchmark suites — created, edited (with the fields that
changed) and deleted, whichever door it came through (a page, the API, YAML, Django
admin). Lazy senders ("app.Model"): this layer imports no app above it.

A save that changes only what the panel keeps up by itself (a host's heartbeat and
agent sample, its weights cache) is not an action and leaves no row.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from apps.audit.context import is_quiet
from apps.audit.services import record, snapshot

# label → (audit noun, fields the panel itself keeps up: not audited)
AUDITED = {
    "recipes.Recipe": ("recipe", set()),
    "hosts.Host": ("host", {
        "last_heartbeat", "heartbeat_worker", "agent_seen_at", "agent_sample", "agent_error",
        "unmanaged", "inventory_at", "inventory_error", "weights_cache", "weights_cache_at",
        "weights_cache_error",
    }),
    "hosts.SparkPair": ("pair", set()),
    "benchmarks.Suite": ("suite", set()),
    # Settings the panel keeps in its database (the rest is the environment): a recipe's
    # guard settings, the gateway's limits and model aliases.
    "recipes.HangPolicy": ("guard-settings", set()),
    "gateway.Limit": ("limit", set()),
    "gateway.ModelAlias": ("alias", set()),
    # The team's shared chat system prompts.
    "chat.SystemPromptPreset": ("system-prompt", set()),
    # Accounts as Django admin edits them; the role is the user's group (below).
    settings.AUTH_USER_MODEL: ("user", {"last_login", "date_joined"}),
}  # fmt: skip


def _state(instance, ignored: set[str]) -> dict:
    """The fields a person sets: not the ones ignored, nor the save's own timestamps."""
    stamps = {f.name for f in instance._meta.concrete_fields if getattr(f, "auto_now", False)}
    return {k: v for k, v in snapshot(instance).items() if k not in ignored | stamps}


def _connect(label: str, noun: str, ignored: set[str]) -> None:
    def before_save(sender, instance, raw=False, **kwargs):
        if raw or is_quiet() or instance.pk is None:
            instance._audit_before = None
            return
        old = sender._default_manager.filter(pk=instance.pk).first()
        instance._audit_before = _state(old, ignored) if old is not None else None

    def after_save(sender, instance, created, raw=False, **kwargs):
        if raw or is_quiet():
            return  # loaddata, or a service that records its own row
        after = _state(instance, ignored)
        before = getattr(instance, "_audit_before", None)
        if created or before is None:
            record(f"{noun}.create", instance, after=after)
            return
        changed = {k for k in after if before.get(k) != after.get(k)}
        if changed:
            record(f"{noun}.edit", instance, before=before, after=after)

    def after_delete(sender, instance, **kwargs):
        if is_quiet():
            return
        record(f"{noun}.delete", instance, before=_state(instance, ignored))

    uid = f"audit-{label}"
    pre_save.connect(before_save, sender=label, weak=False, dispatch_uid=uid)
    post_save.connect(after_save, sender=label, weak=False, dispatch_uid=uid)
    post_delete.connect(after_delete, sender=label, weak=False, dispatch_uid=uid)


for _label, (_noun, _ignored) in AUDITED.items():
    _connect(_label, _noun, _ignored)


# --- a user's role: their one role group -------------------------------------------------

ROLE_NAMES = ("admin", "operator", "member")  # apps.accounts.roles.Role's values


def _role(user) -> str | None:
    return next((n for n in ROLE_NAMES if user.groups.filter(name=n).exists()), None)


def _groups_changed(sender, instance, action, reverse, **kwargs):
    """Django admin saves a user's groups with set(): a remove and an add. The role before
    the first of them is kept, and one row is written when the transaction commits, if
    the role differs then."""
    if reverse or is_quiet() or action not in ("pre_add", "pre_remove", "pre_clear"):
        return
    if getattr(instance, "_audit_role_pending", False):
        return
    instance._audit_role_pending = True
    before = _role(instance)

    def compare() -> None:
        instance._audit_role_pending = False
        after = _role(instance)
        if after != before:
            record("user.role", instance, before={"role": before}, after={"role": after})

    transaction.on_commit(compare)


m2m_changed.connect(
    _groups_changed, sender="auth.User_groups", weak=False, dispatch_uid="audit-user-groups"
)
