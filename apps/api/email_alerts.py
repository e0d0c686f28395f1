"""E-mail alerts: the events a user chose on the profile page, sent with Django's mail
backend (SMTP settings in .env: EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER,
EMAIL_HOST_PASSWORD, EMAIL_USE_TLS, DEFAULT_FROM_EMAIL; docs/guard.md).

Incidents go to every subscriber (any host), a finished job to its owner only. The guard
reports an incident once per episode (the watchdog's "act" once until memory recovers, a
hang once until the run moves again), so a condition that lasts sends one e-mail. Sending
runs as a Celery task on the light `default` queue: a slow mail server never delays the
host agent or a worker. Never raises into what triggered it.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction

from apps.accounts.roles import VIEW_PANEL
from apps.api.models import EmailAlerts
from apps.api.webhooks.formats import summary
from apps.api.webhooks.payloads import incident_payload, job_payload, run_payload
from apps.core.queues import DEFAULT_QUEUE
from apps.runs.models import Run

log = logging.getLogger(__name__)

INCIDENT_EVENTS = {
    "act": "watchdog.kill",
    "warn": "watchdog.warn",
    "hang": "run.hung",
    "alert": "telemetry.alert",
}
SUBJECT_PREFIX = "[SparkPanel] "


def subscribers(event: str, users=None) -> list[str]:
    """The addresses of active users with a role who chose `event` (of `users` only)."""
    rows = EmailAlerts.objects.select_related("user").filter(user__is_active=True)
    if users is not None:
        rows = rows.filter(user__in=users)
    return sorted(
        {r.user.email for r in rows if event in (r.events or []) and r.user.email
         and r.user.has_perm(VIEW_PANEL)}
    )  # fmt: skip


def _queue(payload: dict, addresses: list[str]) -> int:
    """One Celery task sends the message to each address (the payload as webhooks get it:
    its "event" says how to word it)."""
    if not addresses:
        return 0
    title, line, link = summary(payload["event"], payload)
    body = (
        line
        + (f"\n\n{link}" if link else "")
        + ("\n\n-- \nSparkPanel: you chose this alert on your profile page.")
    )
    transaction.on_commit(
        lambda: send_alert.apply_async(
            args=[SUBJECT_PREFIX + title, body, addresses], queue=DEFAULT_QUEUE
        )
    )
    return len(addresses)


def incident_happened(incident) -> int:
    """An incident of a kind someone subscribed to: one e-mail to each of them."""
    try:
        event = INCIDENT_EVENTS.get(incident.kind)
        if event is None:
            return 0
        return _queue(incident_payload(incident), subscribers(event))
    except Exception:
        log.exception("e-mail alerts: incident %s", getattr(incident, "pk", None))
        return 0


def job_finished(job) -> int:
    """A finished job: its owner, if they chose it."""
    try:
        if job.queued_by_id is None:
            return 0
        owner = get_user_model().objects.filter(pk=job.queued_by_id)
        return _queue(job_payload(job), subscribers("job.finished", owner))
    except Exception:
        log.exception("e-mail alerts: job %s", getattr(job, "pk", None))
        return 0


def run_changed(run_id: int, state: str) -> int:
    """A run failed (every subscriber) or became ready (whoever started it, if they chose)."""
    try:
        if state not in ("failed", "ready"):
            return 0
        run = Run.objects.select_related("recipe", "host", "started_by").get(pk=run_id)
        event = f"run.{state}"
        users = None
        if state == "ready":
            if run.started_by_id is None:
                return 0
            users = get_user_model().objects.filter(pk=run.started_by_id)
        return _queue(run_payload(run, event), subscribers(event, users))
    except Exception:
        log.exception("e-mail alerts: run %s", run_id)
        return 0


@shared_task(name="api.send_alert_email", autoretry_for=(OSError,), retry_backoff=30,
             max_retries=3)  # fmt: skip
def send_alert(subject: str, body: str, addresses: list[str]) -> int:
    """One message per address (no one sees another's address)."""
    sent = 0
    for address in addresses:
        sent += send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [address])
    return sent


def send_test(user) -> str:
    """The profile page's "Send test e-mail", sent now: what happened, in words."""
    if not user.email:
        return "Your account has no e-mail address: an admin sets it in Django admin."
    try:
        send_mail(SUBJECT_PREFIX + "test", "A test e-mail from SparkPanel: alerts reach you.",
                  settings.DEFAULT_FROM_EMAIL, [user.email])  # fmt: skip
    except Exception as exc:  # the mail server's own words, not a 500
        return f"Not sent: {type(exc).__name__}: {exc}"[:300]
    return f"Sent to {user.email}."
