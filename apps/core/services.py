from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.template.loader import render_to_string

from apps.core.events import BROADCAST_GROUP, fragment_push
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
    html = render_to_string("core/partials/notice_pushed.html", {"notice": notice})
    transaction.on_commit(lambda: fragment_push(group=BROADCAST_GROUP, html=html))
    return notice


def _push_notices_changed(notice_pk: int) -> None:
    """Tell open pages the notices changed. The live-state module re-renders every page's
    notices from current state when it exists; otherwise the deleted item is replaced by an
    empty, hidden one (same id), which removes it from every open page."""
    try:
        from apps.core.live import push_notices
    except ImportError:
        push_notices = None
    if push_notices is not None:
        push_notices()
        return
    fragment_push(
        group=BROADCAST_GROUP, html=f'<li id="notice-{notice_pk}" class="notice-gone" hidden></li>'
    )


def notice_delete(*, notice: Notice) -> None:
    """Delete a notice and take it off every open page once the delete is committed."""
    pk = notice.pk
    notice.delete()
    transaction.on_commit(lambda: _push_notices_changed(pk))
