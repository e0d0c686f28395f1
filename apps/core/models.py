from django.conf import settings
from django.db import models


class NoticeQuerySet(models.QuerySet):
    def recent(self, limit: int = 5):
        return self.select_related("author").order_by("-created_at", "-pk")[:limit]


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

    objects = NoticeQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return self.message[:60]
