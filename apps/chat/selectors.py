"""What the chat app can say about a run without changing anything."""

from __future__ import annotations

import datetime as dt

from django.db.models import Q

from apps.accounts.roles import MANAGE_USERS
from apps.chat.models import Message

# Someone who sent a chat message this recently is "chatting" on the run.
CHAT_RECENT = dt.timedelta(minutes=10)


def visible_to(user, queryset):
    """The conversations or comparisons `user` may open: members their own, admins
    everyone's (read-only)."""
    return queryset if user.has_perm(MANAGE_USERS) else queryset.filter(user=user)


def chatting_on(run, now: dt.datetime) -> dict:
    """Who would lose a chat if the run stopped (the runs app's stop_impact question,
    apps/runs/signals.py): `chatting`, the usernames with a message on it in the last 10
    minutes or an answer streaming now, and `streaming`, those streaming; both sorted."""
    messages = Message.objects.filter(run=run).filter(
        Q(created_at__gte=now - CHAT_RECENT) | Q(status=Message.Status.STREAMING)
    )
    streaming: set[str] = set()
    chatting: set[str] = set()
    for username, status in messages.values_list("conversation__user__username", "status"):
        if not username:
            continue
        chatting.add(username)
        if status == Message.Status.STREAMING:
            streaming.add(username)
    return {"chatting": sorted(chatting), "streaming": sorted(streaming)}
