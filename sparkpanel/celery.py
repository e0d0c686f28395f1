"""The Celery application.

One worker per Spark consumes only that host's queue `host.<name>` with concurrency 1
and prefetch 1, so container operations and benchmarks on one machine never overlap.
Light tasks go to the `default` queue.
"""

from __future__ import annotations

import os
import re

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkpanel.settings")

app = Celery("sparkpanel")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

DEFAULT_QUEUE = "default"
_HOST_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def host_queue(host_name: str) -> str:
    """The queue that only the named Spark's worker consumes."""
    if not _HOST_NAME.match(host_name):
        raise ValueError(
            f"invalid host name {host_name!r}: use lowercase letters, digits and dashes "
            "(at most 63 characters), as in a DNS label"
        )
    return f"host.{host_name}"


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
