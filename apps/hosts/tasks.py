from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from apps.core.selectors import workers_state
from apps.hosts.models import Host


def hosts_check_workers(timeout: float = 2.0) -> dict[str, str]:
    """Mark every host whose queue a live worker consumes as seen now.

    Workers answer control messages even while their one task slot is busy with a
    15-minute model load, so a loading Spark still shows as online.
    """
    consumers: dict[str, str] = {}
    for worker, queues in workers_state(timeout=timeout).items():
        for queue in queues:
            consumers.setdefault(queue, worker)
    seen = {}
    now = timezone.now()
    for host in Host.objects.all():
        worker = consumers.get(host.queue)
        if worker:
            Host.objects.filter(pk=host.pk).update(last_heartbeat=now, heartbeat_worker=worker)
            seen[host.name] = worker
    return seen


@shared_task(name="hosts.check_workers")
def check_workers() -> dict[str, str]:
    return hosts_check_workers()
