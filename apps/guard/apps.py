from django.apps import AppConfig


class GuardConfig(AppConfig):
    """The host agent: the one process on each Spark that watches its memory, scrapes the
    active run's vLLM and stops that run before the machine freezes (``agent.py``; the
    pure decision in ``watchdog.py``, the host's readings in ``hostmem.py``). It stores
    what it sees through the telemetry app and has no models of its own."""

    name = "apps.guard"
    label = "guard"
    verbose_name = "Memory guard and host agent"

    def ready(self) -> None:
        # The guard's banners, a live element on every page (apps/guard/live.py).
        from apps.guard import live  # noqa: F401
