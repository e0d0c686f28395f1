"""What the gateway hears from other apps: anything that changes who may call which model
where bumps a version in Redis (apps/gateway/store.py), and every gateway process re-reads
it at its next request — a stopped run takes no new request, a role change applies at once.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from apps.accounts.profile import register
from apps.accounts.signals import revoke_credentials
from apps.gateway import keys, store
from apps.gateway.models import AllowedOrigin, Limit, ModelAlias, OnDemand
from apps.recipes.models import Recipe
from apps.runs.signals import colocation_conflicts, run_state_changed


def _routes_changed(**kwargs) -> None:
    transaction.on_commit(lambda: store.bump(store.ROUTES))


def _records_changed(**kwargs) -> None:
    transaction.on_commit(lambda: store.bump(store.GEN))


def exclusive_group_conflicts(*, host, recipe, runs, **kwargs) -> list[str]:
    """Models of one exclusive group (the on-demand catalog) never share a Spark."""
    ids = [recipe.pk, *(r.recipe_id for r in runs)]
    rows = OnDemand.objects.filter(recipe_id__in=ids).exclude(exclusive_group="")
    entries = {e.recipe_id: e for e in rows}
    mine = entries.get(recipe.pk)
    if mine is None:
        return []
    return [
        f"“{recipe}” and “{run.recipe}” are in the exclusive group “{mine.exclusive_group}” "
        f"(the on-demand catalog): they never share a Spark, and {host.name} runs “{run.recipe}”."
        for run in runs
        if run.recipe_id in entries
        and entries[run.recipe_id].exclusive_group == mine.exclusive_group
    ]


def connect() -> None:
    from apps.gateway.views import recipe_section
    from apps.recipes import signals as recipe_signals

    recipe_signals.page_sections.connect(
        recipe_section, weak=False, dispatch_uid="gateway.recipe_on_demand"
    )
    colocation_conflicts.connect(
        exclusive_group_conflicts, weak=False, dispatch_uid="gateway.exclusive_group"
    )
    # run_state_changed is sent after the commit already
    run_state_changed.connect(
        lambda **kw: store.bump(store.ROUTES), weak=False, dispatch_uid="gateway.run_state"
    )
    for model in (Recipe, ModelAlias, AllowedOrigin, OnDemand):  # all held by the table
        for signal in (post_save, post_delete):
            signal.connect(
                _routes_changed,
                sender=model,
                dispatch_uid=f"gateway.routes.{model.__name__}.{signal}",
            )
    user = get_user_model()
    for sender in (Limit, user):
        for signal in (post_save, post_delete):
            signal.connect(
                _records_changed,
                sender=sender,
                dispatch_uid=f"gateway.gen.{sender.__name__}.{signal}",
            )
    m2m_changed.connect(
        _records_changed, sender=user.groups.through, dispatch_uid="gateway.gen.groups"
    )
    post_save.connect(_records_changed, sender=Group, dispatch_uid="gateway.gen.group")

    # A password change that asks for it revokes the user's keys too.
    revoke_credentials.connect(keys.on_revoke_credentials, dispatch_uid="gateway.keys.revoke")

    from apps.gateway import profile_sections

    register(profile_sections.KEYS)
