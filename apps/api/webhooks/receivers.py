"""What enqueues a delivery: the benchmarks app's `job_finished` and the telemetry app's
`incident_recorded` signals, connected to these receivers in apps/api/apps.py. Receivers
never raise: a webhook problem must not break a job's move or the watchdog's action."""

from __future__ import annotations

import logging

from apps.api.models import WebhookDelivery
from apps.api.webhooks.delivery import enqueue
from apps.api.webhooks.payloads import (
    INCIDENT,
    JOB_FINISHED,
    RUN_FAILED,
    RUN_READY,
    incident_payload,
    job_payload,
    run_payload,
)
from apps.benchmarks.models import Job
from apps.runs.models import Run

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


def run_changed(run_id: int, state: str) -> list[WebhookDelivery]:
    """A run failed (every subscriber hears of it) or is ready (whoever started it)."""
    if state not in ("failed", "ready"):
        return []
    try:
        run = Run.objects.select_related("recipe", "host", "started_by").get(pk=run_id)
        event = RUN_FAILED if state == "failed" else RUN_READY
        payload = run_payload(run, event)
    except Exception:
        log.exception("webhooks: could not describe run %s", run_id)
        return []
    if event == RUN_READY:
        return enqueue(event, payload, users=[run.started_by]) if run.started_by_id else []
    return enqueue(event, payload)


def on_run_state_changed(sender, run_id, state, **kwargs) -> None:
    """Receiver of apps.runs.signals.run_state_changed."""
    run_changed(run_id, state)


def on_job_finished(sender, job, **kwargs) -> None:
    """Receiver of apps.benchmarks.signals.job_finished."""
    job_finished(job)


def on_incident_recorded(sender, incident, **kwargs) -> None:
    """Receiver of apps.telemetry.signals.incident_recorded."""
    incident_happened(incident)
