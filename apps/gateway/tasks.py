from celery import shared_task

from apps.gateway import usage


@shared_task(name="gateway.drain_usage", ignore_result=True)
def drain_usage() -> int:
    """Move the gateway's queued usage rows into the database (every few seconds, beat)."""
    return usage.drain()
