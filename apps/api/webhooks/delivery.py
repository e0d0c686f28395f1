"""Sending deliveries: one per subscribed webhook, each POSTed by a Celery task once the
transaction that created it commits, retried with backoff, every attempt checked against
the address policy first.

What is sent (see docs/api.md): a compact JSON body with sorted keys, and the headers
`X-SparkPanel-Event`, `X-SparkPanel-Delivery` (the delivery id: the same on every retry,
so a receiver can drop duplicates), `X-SparkPanel-Timestamp` (unix seconds of this attempt)
and `X-SparkPanel-Signature: sha256=<hex>` (signing.py).

A delivery that does not get a 2xx answer (an error status, a redirect — never followed —,
a timeout after 10 s, a refused connection, a name that does not resolve) is tried again
after 10 s, 30 s, 90 s, 270 s and 810 s (RETRY_DELAYS; settings.WEBHOOK_RETRY_DELAYS
overrides it), six attempts in all, then marked failed. Deliveries are at least once: a
worker killed mid-send retries. A destination the address policy refuses fails at once.

Destinations (apps/api/egress.py): http/https only, ports 80, 443 or 1024–65535, and only
public addresses: loopback, link-local (cloud metadata), unspecified, multicast and reserved
addresses are refused, and private ones unless settings.WEBHOOK_ALLOWED_NETWORKS lists them.
The form checks when a webhook is added (ui.py); every attempt checks again: it resolves
the name once, checks every address, and connects to the first one checked (the URL keeps
its name for the Host header, SNI and certificate verification), so a DNS answer that
changes afterwards (rebinding) cannot move the request. No proxy from the environment is
used, redirects are not followed, and a refused destination gets no connection at all: its
log entry says only "refused: <why>".
"""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit

import httpx
from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accounts.roles import VIEW_PANEL
from apps.api import egress
from apps.api.models import Webhook, WebhookDelivery
from apps.api.webhooks import formats
from apps.api.webhooks.signing import body_bytes, sign
from apps.core.queues import DEFAULT_QUEUE

log = logging.getLogger(__name__)

# Seconds to wait before attempts 2, 3, …: six attempts in all.
RETRY_DELAYS: tuple[float, ...] = (10, 30, 90, 270, 810)
TIMEOUT_S = 10.0
LOG_KEPT = 200  # per webhook; older deliveries are deleted when a new one is created
USER_AGENT = "SparkPanel-Webhook/1"


def retry_delays() -> list[float]:
    return list(getattr(settings, "WEBHOOK_RETRY_DELAYS", RETRY_DELAYS))


def allowed_networks() -> list[egress.Network]:
    """settings.WEBHOOK_ALLOWED_NETWORKS as networks (a bad entry is a system check error,
    apps/api/apps.py)."""
    return egress.parse_networks(getattr(settings, "WEBHOOK_ALLOWED_NETWORKS", []) or [])


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
    hooks = Webhook.objects.filter(active=True, user__is_active=True).select_related("user")
    if users is not None:
        hooks = hooks.filter(user__in=users)
    created = []
    for hook in hooks:
        # JSONField `contains` is not available on SQLite: filter here (few rows).
        if event in (hook.events or []) and hook.user.has_perm(VIEW_PANEL):
            created.append(_create_delivery(hook, event, payload))
    return created


def deliver_to(hook: Webhook, event: str, payload: dict) -> WebhookDelivery:
    """One delivery to this webhook whatever it subscribes to (the test ping), sent once
    the transaction commits."""
    with transaction.atomic():
        return _create_delivery(hook, event, payload)


def _create_delivery(hook: Webhook, event: str, payload: dict) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.create(webhook=hook, event=event, payload=payload)
    old = hook.deliveries.order_by("-created_at", "-pk").values_list("pk", flat=True)[LOG_KEPT:]
    if old_ids := list(old):
        WebhookDelivery.objects.filter(pk__in=old_ids).delete()
    transaction.on_commit(lambda: _schedule(delivery.pk, 0))
    return delivery


def _schedule(delivery_id: int, countdown: float) -> None:
    """Send (or resend) a delivery on the light `default` queue, never a host's queue, so a
    slow receiver never delays a Spark's runs or jobs."""
    try:
        deliver.apply_async(args=[delivery_id], countdown=countdown, queue=DEFAULT_QUEUE)
    except Exception:  # the broker is down: the delivery stays pending in the log
        log.exception("webhooks: could not schedule delivery %s", delivery_id)


# --- sending --------------------------------------------------------------------------------


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


def _send(delivery: WebhookDelivery) -> tuple[int | None, str, bool]:
    """(status code, error, refused for good) of sending this delivery once, signed now."""
    hook = delivery.webhook
    timestamp = str(int(time.time()))
    body, format_headers = formats.render(
        hook.format, delivery.event, delivery.payload, body_bytes(delivery.payload)
    )
    headers = format_headers | {
        "User-Agent": USER_AGENT,
        "X-SparkPanel-Event": delivery.event,
        "X-SparkPanel-Delivery": str(delivery.pk),
        "X-SparkPanel-Timestamp": timestamp,
        "X-SparkPanel-Signature": sign(hook.secret or "", timestamp, body),
    }
    if not hook.active:
        return None, "the webhook is paused", False
    if not hook.secret:  # no configured key decrypts it (models.EncryptedTextField)
        return None, "not sent: the secret cannot be decrypted (key changed?)", True
    try:
        code, error = _post(hook.url, body, headers)
    except Refused as exc:
        return None, str(exc), True
    return code, error, False


def attempt(delivery_id: int) -> str | None:
    """One attempt at a delivery (the Celery task `api.deliver_webhook` calls this):
    2xx → delivered; else the next attempt is scheduled after the backoff, or, after the
    last one, the delivery is marked failed. Returns the state, None if there is nothing
    to send (deleted, or already delivered/failed)."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
        return None
    hook = delivery.webhook
    code, error, refused = _send(delivery)
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


# The task lives beside what it runs (apps/api/tasks.py re-exports it for Celery's
# autodiscovery): _schedule and attempt need each other, in one module.
@shared_task(name="api.deliver_webhook", acks_late=True, ignore_result=True)
def deliver(delivery_id: int) -> str | None:
    """One attempt at a webhook delivery; it schedules the next one itself on failure."""
    return attempt(delivery_id)
