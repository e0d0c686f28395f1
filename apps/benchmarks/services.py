"""Queueing and cancelling benchmark jobs, and where a job stands in its host's queue."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.benchmarks import live
from apps.benchmarks.models import J, Job, Suite, plan_refusal
from apps.hosts.models import Host
from apps.recipes.models import Recipe


class JobRefused(Exception):
    """The job cannot be queued or changed; the message says why. `code` is run
    admission's where the job met it (host_busy, does_not_fit, …), else "refused"."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


# Refusals about the host's current state (the API answers 409); the others are about the
# request (422). The same split as for runs.
CONFLICTS = {"host_busy", "no_free_port", "not_enough_memory", "memory_unknown"}


def suite_plan(suite: Suite) -> dict:
    """The suite as it is now: a queued job keeps this copy, whatever edits follow."""
    return suite.plan()


NEVER_OVERRIDES = (
    " A benchmark job never overrides the planner: an operator can start the run from the "
    "Runs page with the typed confirmation, and a job then reuses it."
)


def job_admission(*, recipe: Recipe, host: Host, user) -> None:
    """Refuse up front what the worker would refuse seconds later, in run admission's own
    words: a host busy with (or reserved by queued jobs for) another recipe; and, when the
    job would start its recipe (no active run of it there to reuse), every rule a run start
    meets — "does not fit" included, which a job never overrides."""
    from apps.runs.models import Run
    from apps.runs.services import RunRefused, admission_check, busy_refusal

    busy = busy_refusal(host, recipe, reuse=True)
    if busy is not None:
        raise JobRefused(busy, "host_busy")
    if not host.image_allowed(recipe.image):
        raise JobRefused(f"{host.name} does not allow the image {recipe.image}.",
                         "image_not_allowed")  # fmt: skip
    if Run.objects.active().filter(host=host, recipe=recipe).exists():
        return  # the job reuses that run
    try:
        admission_check(recipe=recipe, host=host, user=None, reuse=True)
    except RunRefused as exc:
        message = str(exc)
        if exc.code == "does_not_fit":
            message += NEVER_OVERRIDES
        raise JobRefused(message, exc.code) from None


def queue_hints(hosts, recipes) -> list[dict]:
    """For the queue form, before anything is submitted: each host's state and, for every
    recipe, what queueing it there would meet — the words `job_admission` would refuse
    with (busy, image, does not fit), or what the job will do. Memory is measured only
    when a job is really queued."""
    from apps.runs.services import Occupancy, RunRefused, fit_check

    hints = []
    for host in hosts:
        occupancy = Occupancy.of(host)
        if occupancy.active is not None:
            active = occupancy.active
            state = f"runs “{active.recipe}” ({active.get_state_display().lower()})"
        elif occupancy.reserved:
            first, count = occupancy.reserved[0]
            state = f"reserved for “{first}” by {count} job{'s' if count != 1 else ''}"
        else:
            state = "idle"
        if not host.online:
            state += " · no worker seen lately (jobs wait in its queue)"
        per_recipe = {}
        for recipe in recipes:
            busy = occupancy.refusal(recipe.pk, reuse=True)
            reuse = occupancy.reusable(recipe.pk)
            if busy is not None:
                per_recipe[str(recipe.pk)] = {"ok": False, "text": busy}
            elif not host.image_allowed(recipe.image):
                text = f"{host.name} does not allow the image {recipe.image}."
                per_recipe[str(recipe.pk)] = {"ok": False, "text": text}
            elif reuse is not None:
                text = f"The job reuses run {reuse.pk} of “{recipe}” on {host.name}."
                per_recipe[str(recipe.pk)] = {"ok": True, "text": text}
            else:
                try:
                    fit_check(recipe=recipe, host=host)
                except RunRefused as exc:
                    per_recipe[str(recipe.pk)] = {"ok": False, "text": str(exc) + NEVER_OVERRIDES}
                    continue
                text = (
                    f"The job starts “{recipe}” on {host.name} first (a first load can take "
                    "15 minutes on a real Spark)."
                )
                per_recipe[str(recipe.pk)] = {"ok": True, "text": text}
        hints.append({"id": str(host.pk), "name": host.name, "state": state, "recipes": per_recipe})
    return hints


def job_queue(*, suite: Suite, recipe: Recipe, host: Host, user, note: str = "") -> Job:
    from apps.benchmarks.tasks import run_job

    job_admission(recipe=recipe, host=host, user=user)
    # Bounded by the recipe (apps/benchmarks/models.py): prompt + answer within its
    # max_model_len, and what each level builds within the harness's bounds.
    refusal = plan_refusal(
        suite.plan(), max_num_seqs=recipe.max_num_seqs, max_model_len=recipe.max_model_len
    )
    if refusal is not None:
        raise JobRefused(f"{suite.name}: {refusal}", "prompt_too_long")
    with transaction.atomic():
        job = Job.objects.create(
            suite=suite,
            recipe=recipe,
            host=host,
            queued_by=user,
            note=note[:200],
            plan=suite_plan(suite),
        )
        transaction.on_commit(lambda: run_job.apply_async(args=[job.pk], queue=host.queue))
        transaction.on_commit(lambda: live.push_job(job.pk))  # the host's queue, live
    return job


def can_cancel(job: Job, user) -> bool:
    from apps.accounts.roles import OPERATE_RUNS

    return job.is_active and (job.queued_by_id == user.pk or user.has_perm(OPERATE_RUNS))


def job_cancel(*, job: Job, user) -> Job:
    """A queued job is cancelled at once; a running one stops after the request in flight
    and keeps what it measured."""
    if not can_cancel(job, user):
        raise JobRefused("Only the person who queued a job, or an operator, can cancel it.")
    now = timezone.now()
    if job.move(
        J.QUEUED,
        J.CANCELLED,
        finished_at=now,
        cancel_requested_by=user,
        progress={**job.progress, "step": "Cancelled before it started"},
    ):
        return job
    job.move([J.PREPARING, J.RUNNING], J.CANCELLING, cancel_requested_by=user)
    job.refresh_from_db()
    return job


@dataclass(frozen=True)
class QueueEntry:
    job: Job
    position: int  # 0 = running now
    estimated_start: datetime | None
    estimate_s: float | None


def _estimate_seconds(job: Job) -> float | None:
    """The median duration of recent finished jobs like this one (same suite and recipe,
    else same suite)."""
    done = Job.objects.filter(
        state=J.DONE, suite_id=job.suite_id, started_at__isnull=False, finished_at__isnull=False
    )
    for qs in (done.filter(recipe_id=job.recipe_id, host_id=job.host_id), done):
        durations = [j.duration_seconds() for j in qs.order_by("-finished_at")[:5]]
        if durations:
            return statistics.median(durations)
    return None


def host_queue_entries(host: Host) -> list[QueueEntry]:
    """The host's active jobs in execution order: the one running, then FIFO."""
    jobs = list(
        Job.objects.active()
        .filter(host=host)
        .select_related("recipe", "suite", "queued_by")
        .order_by("queued_at", "pk")
    )
    running = [j for j in jobs if j.state != J.QUEUED]
    queued = [j for j in jobs if j.state == J.QUEUED]
    now = timezone.now()
    entries: list[QueueEntry] = []
    clock: datetime | None = now
    # Queued jobs mostly share a suite and recipe: one estimate per kind, not per job (a
    # queue of hundreds would otherwise cost hundreds of queries on every page and push).
    estimates: dict[tuple[int, int, int], float | None] = {}

    def estimate_seconds(job: Job) -> float | None:
        key = (job.suite_id, job.recipe_id, job.host_id)
        if key not in estimates:
            estimates[key] = _estimate_seconds(job)
        return estimates[key]

    for job in running:
        estimate = estimate_seconds(job)
        entries.append(QueueEntry(job, 0, job.started_at, estimate))
        if clock is not None:
            if estimate is None:
                clock = None
            else:
                elapsed = (now - job.started_at).total_seconds() if job.started_at else 0
                clock = clock + timedelta(seconds=max(estimate - elapsed, 0))
    for position, job in enumerate(queued, start=1):
        estimate = estimate_seconds(job)
        entries.append(QueueEntry(job, position, clock, estimate))
        if clock is not None:
            clock = None if estimate is None else clock + timedelta(seconds=estimate)
    return entries


def queue_entry(job: Job) -> QueueEntry | None:
    """Where an active job stands in its host's queue (None once it has finished)."""
    if not job.is_active:
        return None
    return next((e for e in host_queue_entries(job.host) if e.job.pk == job.pk), None)
