from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import AbstractUser
from django.db import transaction

from apps.core import live
from apps.core.models import Notice


def notice_post(
    *,
    author: AbstractUser,
    message: str,
    level: str = Notice.Level.INFO,
    expires_at: dt.datetime | None = None,
) -> Notice:
    """Save a team notice and push it to every open page once the row is committed."""
    notice = Notice.objects.create(
        author=author, message=message, level=level, expires_at=expires_at
    )
    # Every open page re-renders its notices from current state (apps/core/live.py).
    transaction.on_commit(lambda: live.push_notices())
    return notice


def _push_notices_changed(notice_pk: int) -> None:
    """Tell open pages the notices changed: each re-renders them from current state."""
    live.push_notices()


def notice_delete(*, notice: Notice) -> None:
    """Delete a notice and take it off every open page once the delete is committed."""
    pk = notice.pk
    notice.delete()
    transaction.on_commit(lambda: _push_notices_changed(pk))
