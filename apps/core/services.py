from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import transaction
from django.template.loader import render_to_string

from apps.core.events import BROADCAST_GROUP, fragment_push
from apps.core.models import Notice


def notice_post(*, author: AbstractUser, message: str, level: str = Notice.Level.INFO) -> Notice:
    """Save a team notice and push it to every open page once the row is committed."""
    notice = Notice.objects.create(author=author, message=message, level=level)
    html = render_to_string("core/partials/notice_pushed.html", {"notice": notice})
    transaction.on_commit(lambda: fragment_push(group=BROADCAST_GROUP, html=html))
    return notice
