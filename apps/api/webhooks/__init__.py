"""Outgoing webhooks: an HMAC-signed JSON POST when one of your benchmark jobs finishes, or
when the memory watchdog records an incident (on any host).

- signing.py: the secret and the `X-SparkPanel-Signature` HMAC (`verify_signature` is what
  a receiver does);
- payloads.py: the event names and the JSON sent for a job, an incident, a test ping;
- delivery.py: creating deliveries, the Celery task that sends them, retries with backoff,
  the address policy checked before every attempt (apps/api/egress.py);
- receivers.py: the `job_finished` / `incident_recorded` receivers (connected in
  apps/api/apps.py);
- ui.py: the profile page's Webhooks section (form, context, views).

The names below are the package's public face; code inside the app imports the submodule.
"""

from apps.api.webhooks.delivery import (
    RETRY_DELAYS,
    Refused,
    allowed_networks,
    attempt,
    deliver,
    deliver_to,
    enqueue,
    pinned_request,
    retry_delays,
)
from apps.api.webhooks.payloads import (
    INCIDENT,
    JOB_FINISHED,
    PING,
    incident_payload,
    job_payload,
    ping_payload,
)
from apps.api.webhooks.receivers import incident_happened, job_finished
from apps.api.webhooks.signing import body_bytes, new_secret, sign, verify_signature
from apps.api.webhooks.ui import (
    WebhookForm,
    webhook_add,
    webhook_context,
    webhook_delete,
    webhook_test,
)

__all__ = [
    "INCIDENT",
    "JOB_FINISHED",
    "PING",
    "RETRY_DELAYS",
    "Refused",
    "WebhookForm",
    "allowed_networks",
    "attempt",
    "body_bytes",
    "deliver",
    "deliver_to",
    "enqueue",
    "incident_happened",
    "incident_payload",
    "job_finished",
    "job_payload",
    "new_secret",
    "ping_payload",
    "pinned_request",
    "retry_delays",
    "sign",
    "verify_signature",
    "webhook_add",
    "webhook_context",
    "webhook_delete",
    "webhook_test",
]
