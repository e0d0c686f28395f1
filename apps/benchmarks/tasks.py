from celery import shared_task

from apps.benchmarks import runner

# Jobs run on their host's own queue (host.<name>, one task at a time), in FIFO order with
# that host's run starts and stops: two jobs never overlap on one Spark.


@shared_task(name="benchmarks.run_job", acks_late=True)
def run_job(job_id: int) -> None:
    runner.run_job(job_id)
