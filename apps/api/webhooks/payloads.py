"""What a delivery says: the event names and the JSON documents sent for a finished job,
an incident and a test ping (small, no per-request data; see docs/api.md)."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from apps.api.models import Webhook
from apps.benchmarks import selectors

JOB_FINISHED = Webhook.Event.JOB_FINISHED.value
INCIDENT = Webhook.Event.INCIDENT.value
RUN_FAILED = Webhook.Event.RUN_FAILED.value
RUN_READY = Webhook.Event.RUN_READY.value
PING = "ping"


def _absolute(path: str) -> str:
    base = getattr(settings, "SITE_URL", "") or ""
    return base.rstrip("/") + path if base else path


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def job_payload(job) -> dict:
    """What `job.finished` sends: small, no per-request data (fetch the results with the
    API or from the job's page)."""
    answer = selectors.capacity_answer(job)
    return {
        "event": JOB_FINISHED,
        "job": {
            "id": job.pk,
            "state": job.state,
            "suite": job.plan.get("name") or str(job.suite),
            "recipe": str(job.recipe),
            "host": job.host.name,
            "queued_by": job.queued_by.get_username() if job.queued_by else None,
            "queued_at": _iso(job.queued_at),
            "started_at": _iso(job.started_at),
            "finished_at": _iso(job.finished_at),
            "error": (job.error or "")[:500],
            "url": _absolute(job.get_absolute_url()),
        },
        # As on the job's page (computed from the stored levels, as the runner does).
        "summary": selectors.summary_of(answer),
        "capacity": answer,
    }


def incident_payload(incident) -> dict:
    run_id = incident.run_id
    path = reverse("run-detail", args=[run_id]) if run_id else reverse("hosts")
    return {
        "event": INCIDENT,
        "incident": {
            "id": incident.pk,
            "host": incident.host.name,
            "kind": incident.kind,
            "message": incident.message,
            "action": incident.action,
            "run": run_id,
            "recipe": incident.recipe_name,
            "at": _iso(incident.at),
            "url": _absolute(path),
        },
    }


def run_payload(run, event: str) -> dict:
    """`run.failed` / `run.ready`: the run, its recipe and host, and why it failed."""
    return {
        "event": event,
        "run": {
            "id": run.pk,
            "state": run.state,
            "recipe": str(run.recipe),
            "host": run.host.name,
            "started_by": run.started_by.get_username() if run.started_by else None,
            "failure_reason": (run.failure_reason or "")[:500],
            "ready_after_s": run.ready_after_seconds(),
            "url": _absolute(run.get_absolute_url()),
        },
    }


def ping_payload(hook: Webhook) -> dict:
    """A test `ping` (the profile page's "Send test"), whatever events the webhook takes."""
    return {
        "event": PING,
        "webhook": {"id": hook.pk, "events": hook.events},
        "message": "A test ping from SparkPanel: the signature verifies with your secret.",
        "at": timezone.now().isoformat(),
    }
