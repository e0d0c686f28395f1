from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from apps.accounts.signals import revoke_credentials
from apps.api.egress import parse_networks
from apps.benchmarks.signals import job_finished
from apps.runs.signals import run_state_changed
from apps.telemetry.signals import incident_recorded


class ApiConfig(AppConfig):
    name = "apps.api"
    label = "api"
    verbose_name = "API"

    def ready(self) -> None:
        checks.register(check_webhook_networks)
        # Imported here, not at the top: they import models, which are not loaded yet when
        # Django imports this module.
        from apps.api import email_alerts, profile_sections
        from apps.api.webhooks import receivers

        # Webhooks hear of other apps' events through their signals (no model calls us).
        job_finished.connect(receivers.on_job_finished, dispatch_uid="api.webhooks.job_finished")
        incident_recorded.connect(
            receivers.on_incident_recorded, dispatch_uid="api.webhooks.incident"
        )
        # ... and so do e-mail alerts.
        job_finished.connect(
            lambda sender, job, **kw: email_alerts.job_finished(job),
            weak=False, dispatch_uid="api.email.job_finished",
        )  # fmt: skip
        incident_recorded.connect(
            lambda sender, incident, **kw: email_alerts.incident_happened(incident),
            weak=False, dispatch_uid="api.email.incident",
        )  # fmt: skip
        # A run failed or is ready (sent after the commit): webhooks and e-mail.
        run_state_changed.connect(
            receivers.on_run_state_changed, dispatch_uid="api.webhooks.run_state"
        )
        run_state_changed.connect(
            lambda sender, run_id, state, **kw: email_alerts.run_changed(run_id, state),
            weak=False, dispatch_uid="api.email.run_state",
        )  # fmt: skip
        # The profile page (apps.accounts) shows the API's sections: tokens and webhooks.
        profile_sections.register_sections()
        # A password change that asks for it revokes the user's tokens too.
        from apps.api.tokens import on_revoke_credentials

        revoke_credentials.connect(on_revoke_credentials, dispatch_uid="api.tokens.revoke")


def check_webhook_networks(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A WEBHOOK_ALLOWED_NETWORKS entry that is not a network stops start-up (manage.py
    check, runserver, migrate) instead of failing every delivery."""
    try:
        parse_networks(getattr(settings, "WEBHOOK_ALLOWED_NETWORKS", []) or [])
    except ValueError as exc:
        return [checks.Error(str(exc), hint="CIDR networks, e.g. 10.1.0.0/16", id="api.E001")]
    return []
