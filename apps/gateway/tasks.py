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
