from celery import shared_task

from apps.gateway import usage


@shared_task(name="gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Move the gateway's queued usage rows into the database (every few seconds, beat)."""
    return usage.drain()


@shared_task(name="gateway.prune_usage", ignore_result=True)
def prune_usage() -> int:
    """Usage rows past the retention policy: summed into totals, then deleted (hourly)."""
    return usage.prune()


@shared_task(name="gateway.unload_idle", ignore_result=True)
def unload_idle() -> list:
    """Stop on-demand runs idle past their timeout, and add or remove replicas of the
    models that allow several (every 30 s, beat)."""
    from apps.gateway import catalog

    return [*catalog.unload_idle(), *catalog.scale_replicas()]


@shared_task(name="gateway.load_after_stop", ignore_result=True)
def load_after_stop(recipe_id: int, host_id: int, requester_id: int | None = None) -> str:
    """On the host's own queue, behind the stop of the run it replaces: start the
    on-demand model there (admission as any start; a refusal is logged and audited)."""
    from django.contrib.auth import get_user_model

    from apps.gateway import catalog
    from apps.gateway.models import OnDemand
    from apps.hosts.models import Host

    entry = OnDemand.objects.select_related("recipe").filter(recipe_id=recipe_id).first()
    host = Host.objects.filter(pk=host_id).first()
    if entry is None or host is None:
        catalog.store.clear_pending_load(recipe_id)
        return "gone"
    requester = get_user_model().objects.filter(pk=requester_id).first() if requester_id else None
    try:
        state = catalog.start_on(entry, host, requester)
    finally:
        catalog.store.clear_pending_load(recipe_id)  # the run (or its refusal) says the rest
    return state.state
