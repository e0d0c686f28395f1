"""What stopping or restarting a run would interrupt, said before it happens.

The web page asks first (templates/runs/confirm.html) and the stop/restart views refuse a
POST that does not carry confirm=1. The JSON API and the CLI are scripts: they act at once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.utils import timezone

from apps.runs.models import Run
from apps.runs.signals import stop_impact

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
    """Who would lose something, as the apps above say (apps/runs/signals.py::stop_impact):
    people who chatted on the run lately or whose answer is streaming now (the chat app),
    and the benchmark jobs queued or running on it (the benchmarks app)."""
    now = now or timezone.now()
    chatting: set[str] = set()
    streaming: set[str] = set()
    benchmarks: list[dict] = []
    for _receiver, answer in stop_impact.send(sender=Run, run=run, now=now):
        answer = answer or {}
        chatting.update(answer.get("chatting", ()))
        streaming.update(answer.get("streaming", ()))
        benchmarks.extend(answer.get("benchmarks", ()))
    return Impact(chatting=sorted(chatting), streaming=sorted(streaming), benchmarks=benchmarks)
