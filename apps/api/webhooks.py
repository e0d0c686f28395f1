"""Outgoing webhooks: an HMAC-signed JSON POST when one of your benchmark jobs finishes, or
when the memory watchdog records an incident (on any host).

What is sent (see docs/api.md): a compact JSON body with sorted keys, and the headers
`X-SparkPanel-Event`, `X-SparkPanel-Delivery` (the delivery id: the same on every retry,
so a receiver can drop duplicates), `X-SparkPanel-Timestamp` (unix seconds of this attempt)
and `X-SparkPanel-Signature: sha256=<hex>`, the HMAC-SHA256 of `"<timestamp>.<body>"` keyed
with the webhook's secret. `verify_signature` below is what a receiver does.

A delivery that does not get a 2xx answer (an error status, a redirect — never followed —,
a timeout after 10 s, a refused connection, a name that does not resolve) is tried again
after 10 s, 30 s, 90 s, 270 s and 810 s (RETRY_DELAYS; settings.WEBHOOK_RETRY_DELAYS
overrides it), six attempts in all, then marked failed. Deliveries are at least once: a
worker killed mid-send retries. A destination the address policy refuses fails at once.

Security notes for admins:
- The secret is generated here (256 random bits) and stored encrypted (EncryptedTextField,
  apps/api/crypto.py), unlike API tokens, which are hashed: the panel needs it in clear to
  sign every delivery. It is shown to its owner once, when created, and never written to
  logs or to the delivery log.
- Destinations (apps/api/egress.py): http/https only, ports 80, 443 or 1024–65535, and only
  public addresses: loopback, link-local (cloud metadata), unspecified, multicast and
  reserved addresses are refused, and private ones unless settings.WEBHOOK_ALLOWED_NETWORKS
  lists them. The form checks when a webhook is added; every attempt checks again: it
  resolves the name once, checks every address, and connects to the first one checked (the
  URL keeps its name for the Host header, SNI and certificate verification), so a DNS answer
  that changes afterwards (rebinding) cannot move the request. No proxy from the
  environment is used, redirects are not followed, and a refused destination gets no
  connection at all: its log entry says only "refused: <why>".
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from urllib.parse import urlsplit

import httpx
from django import forms
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.api import egress
from apps.api.models import Webhook, WebhookDelivery

log = logging.getLogger(__name__)

JOB_FINISHED = Webhook.Event.JOB_FINISHED.value
INCIDENT = Webhook.Event.INCIDENT.value
PING = "ping"
# Seconds to wait before attempts 2, 3, …: six attempts in all.
RETRY_DELAYS: tuple[float, ...] = (10, 30, 90, 270, 810)
TIMEOUT_S = 10.0
MAX_URL_LENGTH = 500
MAX_WEBHOOKS_PER_USER = 10
LOG_SHOWN = 20  # deliveries listed on the profile page
LOG_KEPT = 200  # per webhook; older deliveries are deleted when a new one is created
USER_AGENT = "SparkPanel-Webhook/1"


# --- signing -----------------------------------------------------------------------------


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def body_bytes(payload: dict) -> bytes:
    """The exact bytes sent and signed: compact JSON, sorted keys, ASCII only."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def _as_bytes(value: str | bytes | int) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def sign(secret: str, timestamp: str | int, body: str | bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, keyed with the secret."""
    message = _as_bytes(timestamp) + b"." + _as_bytes(body)
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify_signature(secret: str, timestamp: str | int, body: str | bytes, signature: str) -> bool:
    """What a receiver does with a delivery: True if `signature` (the
    X-SparkPanel-Signature header) is the HMAC of `timestamp` (X-SparkPanel-Timestamp)
    and the raw request `body`, in constant time. Sign the raw bytes as received, never a
    re-serialised JSON; also reject old timestamps (say, over 5 minutes) against replays."""
    if not secret or not signature:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), signature.strip())


# --- creating deliveries -------------------------------------------------------------------


def enqueue(event: str, payload: dict, users=None) -> list[WebhookDelivery]:
    """A delivery for every active webhook subscribed to `event` (of `users` only, when
    given), each sent by a Celery task once the current transaction commits.

    Never raises: a webhook problem must not break what triggered it (a job finishing, the
    watchdog acting). Errors are logged; inside a transaction only our savepoint rolls back.
    """
    try:
        with transaction.atomic():
            return _enqueue(event, payload, users)
    except Exception:
        log.exception("webhooks: could not queue %s deliveries", event)
        return []


def _enqueue(event: str, payload: dict, users) -> list[WebhookDelivery]:
    from apps.accounts.roles import VIEW_PANEL

    hooks = Webhook.objects.filter(active=True, user__is_active=True).select_related("user")
    if users is not None:
        hooks = hooks.filter(user__in=users)
    created = []
    for hook in hooks:
        # JSONField `contains` is not available on SQLite: filter here (few rows).
        if event in (hook.events or []) and hook.user.has_perm(VIEW_PANEL):
            created.append(_create_delivery(hook, event, payload))
    return created


def _create_delivery(hook: Webhook, event: str, payload: dict) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.create(webhook=hook, event=event, payload=payload)
    old = hook.deliveries.order_by("-created_at", "-pk").values_list("pk", flat=True)[LOG_KEPT:]
    if old_ids := list(old):
        WebhookDelivery.objects.filter(pk__in=old_ids).delete()
    transaction.on_commit(lambda: _schedule(delivery.pk, 0))
    return delivery


def _schedule(delivery_id: int, countdown: float) -> None:
    """Send (or resend) a delivery on the light `default` queue, never a host's queue."""
    from apps.api.tasks import deliver
    from apps.core.queues import DEFAULT_QUEUE

    try:
        deliver.apply_async(args=[delivery_id], countdown=countdown, queue=DEFAULT_QUEUE)
    except Exception:  # the broker is down: the delivery stays pending in the log
        log.exception("webhooks: could not schedule delivery %s", delivery_id)


def _absolute(path: str) -> str:
    base = getattr(settings, "SITE_URL", "") or ""
    return base.rstrip("/") + path if base else path


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def job_payload(job) -> dict:
    """What `job.finished` sends: small, no per-request data (fetch the results with the
    API or from the job's page)."""
    from apps.benchmarks import selectors

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


def job_finished(job) -> list[WebhookDelivery]:
    """Hook: a benchmark job reached done / cancelled / interrupted / failed (Job.move)."""
    from apps.benchmarks.models import Job

    try:
        job = Job.objects.select_related("suite", "recipe", "host", "queued_by").get(pk=job.pk)
        if job.queued_by_id is None:
            return []
        payload = job_payload(job)
    except Exception:
        log.exception("webhooks: could not describe job %s", getattr(job, "pk", None))
        return []
    return enqueue(JOB_FINISHED, payload, users=[job.queued_by_id])


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


def incident_happened(incident) -> list[WebhookDelivery]:
    """Hook: the host agent recorded an incident (every subscriber hears of it)."""
    try:
        payload = incident_payload(incident)
    except Exception:
        log.exception("webhooks: could not describe incident %s", getattr(incident, "pk", None))
        return []
    return enqueue(INCIDENT, payload)


# --- sending --------------------------------------------------------------------------------


def retry_delays() -> list[float]:
    return list(getattr(settings, "WEBHOOK_RETRY_DELAYS", RETRY_DELAYS))


def allowed_networks() -> list[egress.Network]:
    """settings.WEBHOOK_ALLOWED_NETWORKS as networks (a bad entry is a system check error,
    apps/api/apps.py)."""
    return egress.parse_networks(getattr(settings, "WEBHOOK_ALLOWED_NETWORKS", []) or [])


class Refused(Exception):
    """The destination is refused for good: no attempt, no retry."""


def pinned_request(url: str) -> tuple[httpx.URL, dict[str, str], dict]:
    """The URL to connect to (the host replaced by the first checked address), the Host
    header and the request extensions (SNI: the certificate is verified against the name).
    Raises egress.Refused (never retried) or egress.Unresolved (retried)."""
    parsed = httpx.URL(url)  # IDNA-encodes the host as httpx would send it
    target = egress.check_url(str(parsed))
    address = egress.resolve_checked(target, allowed_networks())[0]
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    return parsed.copy_with(host=str(address)), {"Host": parsed.netloc.decode("ascii")}, extensions


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
    """(status code, error) of one POST to the checked, pinned address: no redirects
    followed, the answer's body is not read. Raises Refused for a destination the policy
    refuses, before any connection."""
    try:
        pinned, host_header, extensions = pinned_request(url)
    except egress.Refused as exc:
        raise Refused(f"refused: {exc.reason}") from None
    except httpx.InvalidURL:
        raise Refused("refused: the URL is not valid") from None
    except egress.Unresolved as exc:
        return None, str(exc)
    try:
        with (
            # trust_env=False: no HTTP(S)_PROXY from the environment, which would resolve
            # the name itself and undo the pinning.
            httpx.Client(timeout=TIMEOUT_S, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST", pinned, content=body, headers=headers | host_header, extensions=extensions
            ) as response,
        ):
            code = response.status_code
            if 200 <= code < 300:
                return code, ""
            if 300 <= code < 400:
                return code, f"HTTP {code}: redirects are not followed"
            return code, f"HTTP {code} {response.reason_phrase}".strip()
    except httpx.TimeoutException:
        return None, f"timed out after {TIMEOUT_S:g} s"
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # whatever happens, the delivery log says so
        log.exception("webhooks: sending failed")
        return None, f"{type(exc).__name__}: {exc}"


def attempt(delivery_id: int) -> str | None:
    """One attempt at a delivery (the Celery task `api.deliver_webhook` calls this):
    2xx → delivered; else the next attempt is scheduled after the backoff, or, after the
    last one, the delivery is marked failed. Returns the state, None if there is nothing
    to send (deleted, or already delivered/failed)."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
        return None
    hook = delivery.webhook
    timestamp = str(int(time.time()))
    body = body_bytes(delivery.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-SparkPanel-Event": delivery.event,
        "X-SparkPanel-Delivery": str(delivery.pk),
        "X-SparkPanel-Timestamp": timestamp,
        "X-SparkPanel-Signature": sign(hook.secret or "", timestamp, body),
    }
    refused = False
    if not hook.active:
        code, error = None, "the webhook is paused"
    elif not hook.secret:  # no configured key decrypts it (models.EncryptedTextField)
        code, error, refused = None, "not sent: the secret cannot be decrypted (key changed?)", True
    else:
        try:
            code, error = _post(hook.url, body, headers)
        except Refused as exc:
            code, error, refused = None, str(exc), True
    delivery.attempts += 1
    delivery.status_code = code
    delivery.error = (error.replace(hook.secret, "…") if hook.secret else error)[:300]
    delivery.last_attempt_at = timezone.now()
    delays = retry_delays()
    if not error:
        delivery.state = WebhookDelivery.State.DELIVERED
    elif delivery.attempts > len(delays) or not hook.active or refused:
        delivery.state = WebhookDelivery.State.FAILED
    fields = ["attempts", "status_code", "error", "last_attempt_at", "state"]
    # An update, not save(): a delivery deleted meanwhile (with its webhook) stays deleted.
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        **{name: getattr(delivery, name) for name in fields}
    )
    host = urlsplit(hook.url).hostname or "?"
    log.info("webhook delivery %s (%s) to %s: attempt %s, %s%s", delivery.pk, delivery.event,
             host, delivery.attempts, delivery.state, f" ({error})" if error else "")  # fmt: skip
    if delivery.state == WebhookDelivery.State.PENDING:
        _schedule(delivery.pk, delays[delivery.attempts - 1])
    return delivery.state


# --- the profile page ---------------------------------------------------------------------


class WebhookForm(forms.Form):
    url = forms.URLField(
        label="URL",
        max_length=MAX_URL_LENGTH,
        assume_scheme="https",
        help_text=(
            "http:// or https:// to a public address (port 80, 443 or 1024–65535); the "
            "panel's worker machine POSTs here. LAN receivers need their network allowed "
            "by an admin (WEBHOOK_ALLOWED_NETWORKS)."
        ),
    )
    events = forms.MultipleChoiceField(
        choices=Webhook.Event.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[JOB_FINISHED],
        error_messages={"required": "Choose at least one event."},
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise forms.ValidationError("Only http:// and https:// URLs.")
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise forms.ValidationError(
                "No credentials in the URL: verify the signature on the receiving side instead."
            )
        if not parts.hostname:
            raise forms.ValidationError("The URL needs a host.")
        try:
            # A name that does not resolve here may resolve from the worker: each delivery
            # checks again anyway.
            egress.resolve_checked(egress.check_url(str(httpx.URL(url))), allowed_networks())
        except egress.Refused as exc:
            raise forms.ValidationError(f"Refused: {exc.reason}.") from None
        except egress.Unresolved:
            pass
        except httpx.InvalidURL:
            raise forms.ValidationError("Enter a valid URL.") from None
        return url

    def clean(self):
        cleaned = super().clean()
        if self.user is not None and (
            Webhook.objects.filter(user=self.user).count() >= MAX_WEBHOOKS_PER_USER
        ):
            raise forms.ValidationError(
                f"At most {MAX_WEBHOOKS_PER_USER} webhooks each: delete one first."
            )
        return cleaned


def webhook_context(request: HttpRequest) -> dict:
    """The profile page's webhooks card: the user's webhooks, their latest deliveries and
    the form to add one."""
    user = request.user
    return {
        # The secrets stay encrypted: the page never shows them.
        "webhooks": Webhook.objects.filter(user=user).defer("secret"),
        "webhook_deliveries": WebhookDelivery.objects.filter(webhook__user=user)
        .select_related("webhook")
        .defer("webhook__secret")
        .order_by("-created_at", "-pk")[:LOG_SHOWN],
        "webhook_form": WebhookForm(),
        "webhook_retry_delays": [f"{d:g}" for d in retry_delays()],
    }


def _profile(request: HttpRequest, status: int = 200, **extra) -> HttpResponse:
    from apps.accounts.views import _context

    return render(request, "accounts/profile.html", _context(request, **extra), status=status)


@require_POST
def webhook_add(request: HttpRequest) -> HttpResponse:
    """Create a webhook and show its secret this once (the page is not cached)."""
    form = WebhookForm(request.POST, user=request.user)
    if not form.is_valid():
        return _profile(request, status=400, webhook_form=form)
    hook = Webhook.objects.create(
        user=request.user,
        url=form.cleaned_data["url"],
        secret=new_secret(),
        events=[e for e, _ in Webhook.Event.choices if e in form.cleaned_data["events"]],
    )
    response = _profile(request, new_webhook=hook, new_webhook_secret=hook.secret)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def webhook_delete(request: HttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(Webhook, pk=pk, user=request.user)
    hook.delete()
    messages.success(request, f"Webhook to {hook.url} deleted, with its delivery log.")
    return redirect(reverse("profile") + "#webhooks")


@require_POST
def webhook_test(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a `ping` delivery to this webhook, whatever events it subscribes to."""
    hook = get_object_or_404(Webhook, pk=pk, user=request.user)
    payload = {
        "event": PING,
        "webhook": {"id": hook.pk, "events": hook.events},
        "message": "A test ping from SparkPanel: the signature verifies with your secret.",
        "at": timezone.now().isoformat(),
    }
    with transaction.atomic():
        _create_delivery(hook, PING, payload)
    messages.success(request, "Test ping queued: its result appears in the delivery log below.")
    return redirect(reverse("profile") + "#webhooks")
