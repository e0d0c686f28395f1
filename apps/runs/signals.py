"""What the runs app tells, and asks, the apps above it (Django signals: runs never imports
benchmarks or chat). The receivers are connected in their apps' ``AppConfig.ready()``
with a ``dispatch_uid``; none may raise.

Told:

``host_worker_free(sender=Host, host=host)``: no task of the host's worker is running now
— sent by ``runner.reconcile`` (it runs on the host's own queue) and by ``manage.py
mark_stopped`` (the worker is gone). Whatever another app still marks as being worked on
there lost its worker: the benchmarks app interrupts such jobs (their results stay).
Each receiver returns the ids of what it interrupted (a list; mark_stopped reports them).

``run_state_changed(sender=Run, run_id=id, state=state)``: a run moved to another state
(sent once the change is committed, whoever made it). The gateway re-reads its routes;
the chat pushes the run's line to open conversation pages (apps/chat/live.py).

Asked (provider hooks: ``send`` returns ``[(receiver, value)]``, and the runs app
combines the values):

``host_claims(sender=Occupancy, host=host, job=job_or_None)``: what holds the host besides
its run, for run admission (one model at a time per Spark: a run of another recipe is
refused meanwhile) and for what a benchmark job queued now would wait for. Each receiver
returns a list of `Claim`: the benchmarks app, one per recipe its active jobs on the host
are for. With a benchmark `job`, only the jobs ahead of it count; else None. (The worker
running a job asks no claims: its turn has come, and the jobs ahead swap in theirs.)

``colocation_conflicts(sender=Run, host=host, recipe=recipe, runs=[run, ...])``: why a run
of `recipe` may not start beside `runs`, the host's active runs, when the host runs several
models side by side (apps/runs/colocation.py). Each receiver returns a list of sentences
(none: no objection): the gateway's catalog keeps the models of an exclusive group apart.

``stop_impact(sender=Run, run=run, now=datetime)``: who would lose something if the run
were stopped or restarted (the confirm page, apps/runs/confirm.py). Each receiver returns
a dict with some of ``chatting`` (usernames that chatted on the run lately or whose answer
is streaming), ``streaming`` (those streaming now) and ``benchmarks`` (``{"pk", "user",
"state", "suite"}`` per job queued or running on it, in queue order).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.dispatch import Signal

if TYPE_CHECKING:  # a model: this module is imported before the app registry is ready
    from apps.recipes.models import Recipe

host_worker_free = Signal()
host_claims = Signal()
stop_impact = Signal()
colocation_conflicts = Signal()
run_state_changed = Signal()


@dataclass(frozen=True)
class Claim:
    """Work waiting for (or holding) a host for one recipe: `count` items of `noun` (e.g.
    "benchmark job"), the oldest queued at `since`. It reserves the host for its recipe."""

    recipe: Recipe
    count: int
    since: dt.datetime
    noun: str

    def words(self) -> str:
        """ "a benchmark job", "3 benchmark jobs"."""
        return f"a {self.noun}" if self.count == 1 else f"{self.count} {self.noun}s"
