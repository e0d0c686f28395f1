"""How a benchmark job ends, whoever ends it: one function per step.

- `request_cancel`: a member's cancel (a queued job is cancelled at once; a working one is
  marked cancelling and its worker stops after the request in flight);
- `finish`: the worker ends the job done, failed or cancelled (`finish_cancelled`);
- `interrupt`: the job lost its worker (`WORKER_LOST`) or its model (the memory
  watchdog, apps/guard/agent.py, with its own reason);
- `reap`: on the host's own queue, or once its worker is gone, every job of the host still
  marked working lost its worker (run reconciliation and `manage.py mark_stopped` ask for
  it through apps/runs/signals.py::host_worker_free).

Every change goes through `Job.move` (conditional: a racing cancel or a redelivered task
cannot apply it twice; it pushes the change and sends `job_finished`). The levels measured
before a job ends are always kept.
"""

from __future__ import annotations

from django.utils import timezone

from apps.benchmarks import live, selectors
from apps.benchmarks.models import WORKING_JOB_STATES, J, Job

WORKER_LOST = (
    "Interrupted: the worker running this job stopped in the middle (killed, restarted or "
    "lost). The levels measured before that are kept; queue the job again for the rest."
)
CANCELLED = "Cancelled: the levels measured before the cancel are kept."
CANCELLED_BEFORE_START = "Cancelled before it started"
# The progress line a finished job shows.
FINISHED_STEPS = {J.DONE: "Finished", J.FAILED: "Failed", J.CANCELLED: "Cancelled"}


def request_cancel(job: Job, *, by) -> Job:
    """A queued job is cancelled at once; a working one is marked cancelling (its worker
    sees that, stops after the request in flight and keeps what it measured)."""
    if job.move(
        J.QUEUED,
        J.CANCELLED,
        finished_at=timezone.now(),
        cancel_requested_by=by,
        progress={**job.progress, "step": CANCELLED_BEFORE_START},
    ):
        return job
    job.move([J.PREPARING, J.RUNNING], J.CANCELLING, cancel_requested_by=by)
    job.refresh_from_db()
    return job


def finish(job: Job, state: str, error: str = "") -> None:
    """The worker ends its job (done, failed or cancelled), then stores its summary and
    pushes its results. A job interrupted meanwhile keeps that state."""
    job.move(
        WORKING_JOB_STATES,
        state,
        finished_at=timezone.now(),
        error=error,
        progress={**job.progress, "step": FINISHED_STEPS.get(state, state)},
    )
    job.refresh_from_db()
    _settle(job)


def finish_cancelled(job: Job) -> None:
    """The worker stopped for a cancel: cancelled, with what it measured before."""
    finish(job, J.CANCELLED, error=CANCELLED)


def interrupt(job: Job, reason: str = WORKER_LOST, *, settle: bool = True) -> bool:
    """Mark a working job interrupted, saying why (its results stay). `settle` (the job's
    worker is gone) also stores its summary and pushes its results here; without it (the
    watchdog killed the model under a live worker) the worker does that itself once it
    has stored the level in flight, cut short. False when the job was not working."""
    moved = job.move(WORKING_JOB_STATES, J.INTERRUPTED, finished_at=timezone.now(), error=reason)
    if moved and settle:
        _settle(job)
    return moved


def interrupt_working(host, reason: str = WORKER_LOST, *, settle: bool = True) -> list[int]:
    """`interrupt` every job of the host that is working; returns the ids interrupted."""
    return [
        job.pk
        for job in Job.objects.filter(host=host, state__in=WORKING_JOB_STATES)
        if interrupt(job, reason, settle=settle)
    ]


def reap(host) -> list[int]:
    """On the host's own queue (or once its worker is gone) no job of this host can be
    running now: any job still marked working there lost its worker."""
    return interrupt_working(host, WORKER_LOST)


def _settle(job: Job) -> None:
    """What an ended job keeps: its summary (the capacity answer), and its results pushed
    to open pages (as `live.push_progress(job, results=True)`)."""
    summary = selectors.summary_of(selectors.capacity_answer(job))
    Job.objects.filter(pk=job.pk).update(summary=summary)
    job.summary = summary
    live.push_job(job.pk, results=True)
