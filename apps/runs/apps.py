from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # The run's live elements and the hosts' dashboard lines (models are loaded now).
        from apps.runs import live  # noqa: F401
