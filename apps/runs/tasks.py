from celery import shared_task

from apps.runs import runner

# Container starts and benchmarks on one Spark run one at a time on its own queue
# (host.<name>, concurrency 1); these tasks are routed there by the services.


@shared_task(name="runs.start", acks_late=True)
def start_run(run_id: int) -> None:
    runner.start(run_id)


@shared_task(name="runs.stop", acks_late=True)
def stop_run(run_id: int) -> None:
    runner.stop(run_id)
