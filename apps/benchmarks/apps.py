from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "apps.benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"

    def ready(self) -> None:
        # The job and queue live elements (apps/benchmarks/live.py; models are loaded now).
        from apps.benchmarks import live  # noqa: F401
