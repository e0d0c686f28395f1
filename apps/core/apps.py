from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"
    verbose_name = "Notices and live events"

    def ready(self) -> None:
        # The live mechanism and core's own elements, the notices (apps/core/live.py).
        from apps.core import live  # noqa: F401
