from celery import shared_task

from apps.hosts.models import Host
from apps.runs import live, pair, runner, weights

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


# A pair run's worker Spark does its half on its own queue (apps/runs/pair.py).
@shared_task(name="runs.pair_join", acks_late=True)
def pair_join(run_id: int) -> None:
    pair.join(run_id)


@shared_task(name="runs.pair_leave", acks_late=True)
def pair_leave(run_id: int) -> None:
    pair.leave(run_id)


@shared_task(name="runs.pair_stop_head", acks_late=True)
def pair_stop_head(run_id: int) -> None:
    pair.stop_head(run_id)


@shared_task(name="runs.reconcile", acks_late=True)
def reconcile(host_id: int) -> list[int]:
    return runner.reconcile(host_id)


@shared_task(name="runs.reconcile_all")
def reconcile_all() -> None:
    """Periodic (beat): each host's reconcile runs on that host's own queue, where its
    servers are. A retired host had nothing active when it was retired, and its queue may
    have no worker any more: nothing is sent there to pile up."""
    for host in Host.objects.in_service():
        reconcile.apply_async(args=[host.pk], queue=host.queue)


# The model cache lives on the Spark: its worker scans, deletes and downloads (weights.py).
@shared_task(name="runs.weights_scan")
def weights_scan(host_id: int) -> None:
    weights.scan(Host.objects.get(pk=host_id))
    live.push_host_weights(Host.objects.get(pk=host_id).name)


@shared_task(name="runs.weights_delete")
def weights_delete(host_id: int, repo_id: str, commits: list[str] | None) -> dict:
    host = Host.objects.get(pk=host_id)
    try:
        return {"freed_bytes": weights.delete(host, repo_id, commits)}
    except weights.WeightsFailed as exc:
        weights.record_refusal(host, exc)
        return {"error": exc.reason, "advice": exc.advice}
    finally:
        live.push_host_weights(host.name)


@shared_task(name="runs.prefetch", acks_late=True)
def prefetch(prefetch_id: int) -> None:
    weights.prefetch(prefetch_id, changed=live.push_host_weights)
