"""The Celery application.

One worker per Spark consumes only that host's queue `host.<name>` with concurrency 1
and prefetch 1, so container operations and benchmarks on one machine never overlap.
Light tasks go to the `default` queue.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready

from apps.core.queues import DEFAULT_QUEUE, host_queue  # noqa: F401  (re-exported: the names are the core app's)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkpanel.settings")

app = Celery("sparkpanel")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _reconcile_on_start(sender=None, **kwargs) -> None:
    """A (re)started Spark worker first checks its hosts' runs against their servers."""
    try:
        names = [queue.name for queue in sender.task_consumer.queues]
    except AttributeError:
        return
    host_names = [name.removeprefix("host.") for name in names if name.startswith("host.")]
    if not host_names:
        return
    from apps.hosts.models import Host
    from apps.runs.tasks import reconcile

    for host in Host.objects.filter(name__in=host_names):
        reconcile.apply_async(args=[host.pk], queue=host.queue)
