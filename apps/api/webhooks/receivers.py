"""What enqueues a delivery: the benchmarks app's `job_finished` and the telemetry app's
`incident_recorded` signals, connected to these receivers in apps/api/apps.py. Receivers
never raise: a webhook problem must not break a job's move or the watchdog's action."""

from __future__ import annotations

import logging

from apps.api.models import WebhookDelivery
from apps.api.webhooks.delivery import enqueue
from apps.api.webhooks.payloads import INCIDENT, JOB_FINISHED, incident_payload, job_payload
from apps.benchmarks.models import Job

log = logging.getLogger(__name__)


def job_finished(job) -> list[WebhookDelivery]:
    """A benchmark job reached done / cancelled / interrupted / failed (Job.move): its
    owner's subscribed webhooks hear of it."""
    try:
        job = Job.objects.select_related("suite", "recipe", "host", "queued_by").get(pk=job.pk)
        if job.queued_by_id is None:
            return []
        payload = job_payload(job)
    except Exception:
        log.exception("webhooks: could not describe job %s", getattr(job, "pk", None))
        return []
    return enqueue(JOB_FINISHED, payload, users=[job.queued_by_id])


def incident_happened(incident) -> list[WebhookDelivery]:
    """The host agent recorded an incident: every subscriber hears of it."""
    try:
        payload = incident_payload(incident)
    except Exception:
        log.exception("webhooks: could not describe incident %s", getattr(incident, "pk", None))
        return []
    return enqueue(INCIDENT, payload)


def on_job_finished(sender, job, **kwargs) -> None:
    """Receiver of apps.benchmarks.signals.job_finished."""
    job_finished(job)


def on_incident_recorded(sender, incident, **kwargs) -> None:
    """Receiver of apps.telemetry.signals.incident_recorded."""
    incident_happened(incident)
