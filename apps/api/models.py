"""Personal API tokens, idempotency keys for queueing, and outgoing webhooks."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.api.crypto import FieldCipher, UndecryptableError, cipher_for

log = logging.getLogger(__name__)


def field_cipher() -> FieldCipher:
    """The cipher for secrets at rest: settings.FIELD_ENCRYPTION_KEY (a list: the first
    encrypts, all decrypt), else SECRET_KEY and SECRET_KEY_FALLBACKS. Changing SECRET_KEY
    without keeping the old one in SECRET_KEY_FALLBACKS (or FIELD_ENCRYPTION_KEY) makes the
    stored secrets unreadable: see docs/api.md, "Rotating the encryption key"."""
    keys = [k.strip() for k in getattr(settings, "FIELD_ENCRYPTION_KEY", None) or [] if k.strip()]
    if not keys:
        keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return cipher_for(tuple(keys))


class EncryptedTextField(models.TextField):
    """A string stored encrypted (apps/api/crypto.py) and read back in clear.

    Clear in Python, `enc1:<Fernet token>` in the database (also in dumpdata's output, so a
    fixture loads back). A stored value no configured key opens reads as "" with one error
    logged: the webhook then fails its deliveries with a clear message instead of a 500.
    """

    def from_db_value(self, value, expression, connection):
        return self.to_python(value)

    def to_python(self, value):
        if not isinstance(value, str) or not FieldCipher.is_encrypted(value):
            return value  # None, "", or a clear value not yet migrated
        try:
            return field_cipher().decrypt(value)
        except UndecryptableError:
            log.error(
                "%s: a stored secret cannot be decrypted with the configured keys "
                "(FIELD_ENCRYPTION_KEY / SECRET_KEY changed?)",
                self.model.__name__,
            )
            return ""

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        if not value or FieldCipher.is_encrypted(value):
            return value
        return field_cipher().encrypt(value)

    def value_to_string(self, obj) -> str:
        return self.get_prep_value(self.value_from_object(obj)) or ""


class ApiTokenQuerySet(models.QuerySet):
    def live(self):
        return self.filter(revoked_at__isnull=True)


class ApiToken(models.Model):
    """A personal token. Only its SHA-256 digest is stored: the clear token is shown once.

    A token acts as its user, with the user's role at the time of each request (change the
    role and every token follows; deactivate the user and every token stops working).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What it is for, e.g. “nightly CI”.")
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class IdempotencyKey(models.Model):
    """The answer to a 'queue a job' request, kept so that a retried request with the same
    Idempotency-Key returns the same job instead of queueing a second one."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    key = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    job = models.ForeignKey("benchmarks.Job", null=True, on_delete=models.CASCADE)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user")
        ]

    def __str__(self) -> str:
        return self.key


class Webhook(models.Model):
    """Where to POST (HMAC-signed) when one of the user's jobs finishes or an incident
    happens."""

    class Event(models.TextChoices):
        JOB_FINISHED = "job.finished", "A benchmark job I queued finished"
        INCIDENT = "incident", "The guard acted or warned: memory, a hung run (any host)"
        RUN_FAILED = "run.failed", "A run failed (any host)"
        RUN_READY = "run.ready", "A run I started is ready"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhooks"
    )
    url = models.URLField(max_length=500)
    # Needed in clear to sign every delivery, so encrypted rather than hashed.
    secret = EncryptedTextField()
    events = models.JSONField(default=list)
    # How the POST looks: the panel's signed JSON, or a chat/push service's own message
    # (apps/api/webhooks/formats.py).
    format = models.CharField(
        max_length=10,
        default="generic",
        choices=[
            ("generic", "SparkPanel JSON (signed; any receiver)"),
            ("slack", "Slack incoming webhook"),
            ("discord", "Discord webhook"),
            ("teams", "Microsoft Teams (Workflows webhook, Adaptive Card)"),
            ("ntfy", "ntfy topic"),
        ],
    )  # fmt: skip  (the one list: apps/api/webhooks/formats.py reads it from here)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.url


class WebhookDelivery(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook}"


class EmailAlerts(models.Model):
    """Which events a user hears of by e-mail (the profile page's "E-mail alerts"), at the
    address on their account (apps/api/email_alerts.py)."""

    class Event(models.TextChoices):
        KILL = "watchdog.kill", "The memory watchdog stopped a run (any host)"
        WARN = "watchdog.warn", "Memory low on a host (any host)"
        HANG = "run.hung", "A run hung (any host)"
        ALERT = (
            "telemetry.alert",
            (
                "A run's KV cache stayed above 90 % or it preempted, or a host's memory could not "
                "be read (any host)"
            ),
        )
        RUN_FAILED = "run.failed", "A run failed (any host)"
        RUN_READY = "run.ready", "A run I started is ready"
        JOB = "job.finished", "A benchmark job I queued finished"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="email_alerts"
    )
    events = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"{self.user}: {', '.join(self.events) or 'none'}"
