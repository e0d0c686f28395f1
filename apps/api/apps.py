from django.apps import AppConfig
from django.core import checks


class ApiConfig(AppConfig):
    name = "apps.api"
    label = "api"
    verbose_name = "API"

    def ready(self) -> None:
        checks.register(check_webhook_networks)
        # Webhooks hear of other apps' events through their signals (no model calls us).
        from apps.benchmarks.signals import job_finished
        from apps.telemetry.signals import incident_recorded

        job_finished.connect(_job_finished, dispatch_uid="api.webhooks.job_finished")
        incident_recorded.connect(_incident_recorded, dispatch_uid="api.webhooks.incident")


def _job_finished(sender, job, **kwargs) -> None:
    from apps.api import webhooks

    webhooks.job_finished(job)


def _incident_recorded(sender, incident, **kwargs) -> None:
    from apps.api import webhooks

    webhooks.incident_happened(incident)


def check_webhook_networks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A WEBHOOK_ALLOWED_NETWORKS entry that is not a network stops start-up (manage.py
    check, runserver, migrate) instead of failing every delivery."""
    from django.conf import settings

    from apps.api.egress import parse_networks

    try:
        parse_networks(getattr(settings, "WEBHOOK_ALLOWED_NETWORKS", []) or [])
    except ValueError as exc:
        return [checks.Error(str(exc), hint="CIDR networks, e.g. 10.1.0.0/16", id="api.E001")]
    return []
