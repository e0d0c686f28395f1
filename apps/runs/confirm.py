"""What stopping or restarting a run would interrupt, said before it happens.

The web page asks first (templates/runs/confirm.html) and the stop/restart views refuse a
POST that does not carry confirm=1. The JSON API and the CLI are scripts: they act at once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Q
from django.utils import timezone

from apps.runs.models import Run

# Someone who sent a chat message this recently is "chatting" on the run.
CHAT_RECENT = dt.timedelta(minutes=10)
# What a stop costs on a real DGX Spark: the model loads again (weights, compile, warm-up).
REAL_RESTART_MINUTES = 15


@dataclass
class Impact:
    chatting: list[str] = field(default_factory=list)  # usernames, "(streaming)" marked
    streaming: list[str] = field(default_factory=list)
    benchmarks: list[dict] = field(default_factory=list)  # {"pk", "user", "state", "suite"}

    @property
    def anyone(self) -> bool:
        return bool(self.chatting or self.benchmarks)


def run_impact(run: Run, now: dt.datetime | None = None) -> Impact:
    """Who would lose something: people who chatted on the run in the last 10 minutes or
    whose answer is streaming now, and the benchmark jobs queued or running on it."""
    from apps.benchmarks.models import Job
    from apps.chat.models import Message

    now = now or timezone.now()
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
    jobs = (
        Job.objects.active()
        .filter(Q(run=run) | Q(run__isnull=True, host_id=run.host_id, recipe_id=run.recipe_id))
        .select_related("queued_by", "suite")
        .order_by("pk")
    )
    benchmarks = [
        {
            "pk": job.pk,
            "user": job.queued_by.get_username() if job.queued_by else "someone",
            "state": job.get_state_display(),
            "suite": job.suite.name,
        }
        for job in jobs
    ]
    return Impact(chatting=sorted(chatting), streaming=sorted(streaming), benchmarks=benchmarks)
