from django.apps import AppConfig

from apps.runs.signals import host_claims, host_worker_free, stop_impact


class BenchmarksConfig(AppConfig):
    name = "apps.benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # The runs app tells and asks through its signals (apps/runs/signals.py): queued
        # jobs reserve their host, a stop interrupts them, a free worker has no job.
        host_claims.connect(_host_claims, dispatch_uid="benchmarks.host_claims")
        stop_impact.connect(_stop_impact, dispatch_uid="benchmarks.stop_impact")
        host_worker_free.connect(_host_worker_free, dispatch_uid="benchmarks.reap")
        # Retiring a host asks what waits there (apps/hosts/signals.py).
        from apps.hosts.signals import retire_blockers

        retire_blockers.connect(_retire_blockers, dispatch_uid="benchmarks.retire_blockers")
        # The recipe and run pages ask for the capacity story (apps/recipes/signals.py).
        from apps.recipes.signals import capacity

        capacity.connect(_capacity, dispatch_uid="benchmarks.capacity")
        # The job and queue live elements (apps/benchmarks/live.py; models are loaded now).
        from apps.benchmarks import live  # noqa: F401


# The modules are imported in the receivers: apps.py loads before the models are ready.


def _capacity(sender, *, recipe, run=None, **kwargs) -> list:
    from apps.benchmarks.capacity import story

    return [story(recipe, run)]


def _host_claims(sender, host, job=None, **kwargs) -> list:
    from apps.benchmarks.selectors import host_claims

    return host_claims(host, ahead_of=job)


def _stop_impact(sender, run, **kwargs) -> dict:
    from apps.benchmarks.selectors import jobs_on_run

    return {"benchmarks": jobs_on_run(run)}


def _host_worker_free(sender, host, **kwargs) -> list[int]:
    from apps.benchmarks.lifecycle import reap

    return reap(host)


def _retire_blockers(sender, *, host, **kwargs) -> list[str]:
    from apps.benchmarks.models import Job

    jobs = Job.objects.active().filter(host=host).order_by("pk")
    return [
        f"benchmark job {job.pk} is {job.get_state_display().lower()} there — cancel it or "
        f"let it finish ({job.get_absolute_url()})"
        for job in jobs
    ]
