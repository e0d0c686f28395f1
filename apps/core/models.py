from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.accounts.roles import POST_NOTICES


class NoticeQuerySet(models.QuerySet):
    def current(self, now=None):
        """Notices that have not expired yet (no expiry = until deleted), newest first."""
        now = now or timezone.now()
        return (
            self.filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now))
            .select_related("author")
            .order_by("-created_at", "-pk")
        )

    def recent(self, limit: int = 5):
        """The newest current (unexpired) notices."""
        return self.current()[:limit]


class Notice(models.Model):
    """A short message an operator posts to everyone using the panel
    ("Taking spark-1 down for an image update at 14:00")."""

    class Level(models.TextChoices):
        INFO = "info", "Info"
        WARNING = "warning", "Warning"

    MAX_LENGTH = 280

    message = models.CharField(max_length=MAX_LENGTH)
    level = models.CharField(max_length=16, choices=Level.choices, default=Level.INFO)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="notices"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # None: shown until someone deletes it.
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    objects = NoticeQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.message[:60]

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    def can_delete(self, user) -> bool:
        """The author, operators (who may post notices) and admins may delete a notice."""
        if not getattr(user, "is_authenticated", False):
            return False
        return user.pk == self.author_id or user.is_superuser or user.has_perm(POST_NOTICES)
