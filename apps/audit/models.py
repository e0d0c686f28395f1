"""An audit row: who did what, when, from where, and the thing before and after.

Append-only: a saved row cannot be saved again or deleted through the ORM's instance or
queryset methods, the admin shows rows read-only, and no view changes them.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditLocked(Exception):
    """An attempt to change or delete an audit row."""


class AuditQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditLocked("audit rows cannot be changed")

    def delete(self):
        raise AuditLocked("audit rows cannot be deleted")


class AuditEntry(models.Model):
    class Source(models.TextChoices):
        WEB = "web", "web page"
        API = "api", "API"
        ADMIN = "admin", "Django admin"
        SYSTEM = "system", "the panel itself"
        WATCHDOG = "watchdog", "the guard (host agent)"
        COMMAND = "command", "the command line (manage.py)"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+",
    )  # fmt: skip
    # Kept when the account is deleted later: the row still says who it was.
    actor_name = models.CharField(max_length=150, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.SYSTEM)
    address = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=40, db_index=True)  # e.g. "run.start"
    target_type = models.CharField(max_length=40, db_index=True)  # e.g. "run"
    target_id = models.CharField(max_length=40, blank=True)
    target = models.CharField(max_length=200, blank=True)  # how it read then
    message = models.CharField(max_length=500, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    changes = models.JSONField(default=dict, blank=True)  # {field: [before, after]}

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["target_type", "target_id"])]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        who = self.actor_name or self.get_source_display()
        return f"{self.at:%Y-%m-%d %H:%M:%S} {who}: {self.action} {self.target}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AuditLocked("audit rows cannot be changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditLocked("audit rows cannot be deleted")
