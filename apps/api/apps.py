from django.apps import AppConfig
from django.core import checks


class ApiConfig(AppConfig):
    name = "apps.api"
    label = "api"
    verbose_name = "API"

    def ready(self) -> None:
        checks.register(check_webhook_networks)


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
