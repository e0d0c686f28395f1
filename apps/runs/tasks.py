from celery import shared_task

from apps.hosts.models import Host
from apps.runs import runner

# Container starts and benchmarks on one Spark run one at a time on its own queue
# (host.<name>, concurrency 1); these tasks are routed there by the services.


@shared_task(name="runs.start", acks_late=True)
def start_run(run_id: int) -> None:
    runner.start(run_id)


@shared_task(name="runs.stop", acks_late=True)
def stop_run(run_id: int) -> None:
    runner.stop(run_id)


@shared_task(name="runs.restart", acks_late=True)
def restart_run(run_id: int, user_id: int | None) -> int | None:
    return runner.restart(run_id, user_id)


@shared_task(name="runs.reconcile", acks_late=True)
def reconcile(host_id: int) -> list[int]:
    return runner.reconcile(host_id)


@shared_task(name="runs.reconcile_all")
def reconcile_all() -> None:
    """Periodic (beat): each host's reconcile runs on that host's own queue, where its
    servers are."""
    for host in Host.objects.all():
        reconcile.apply_async(args=[host.pk], queue=host.queue)
