"""Queueing and cancelling benchmark jobs, and where a job stands in its host's queue."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from apps.benchmarks.models import J, Job, Suite
from apps.core import live
from apps.hosts.models import Host
from apps.recipes.models import Recipe


class JobRefused(Exception):
    """The job cannot be queued or changed; the message says why."""


def suite_plan(suite: Suite) -> dict:
    """The suite as it is now: a queued job keeps this copy, whatever edits follow."""
    return {
        "suite_id": suite.pk,
        "name": suite.name,
        "scenarios": list(suite.scenarios),
        "repetitions": suite.repetitions,
        "warmup_requests": suite.warmup_requests,
        "sweep": {
            "enabled": suite.sweep_enabled,
            "prompt_tokens": suite.sweep_prompt_tokens,
            "output_tokens": suite.sweep_output_tokens,
            "levels": list(suite.sweep_levels),
            "requests_per_level": suite.requests_per_level,
        },
        "slo": {"ttft_s": suite.slo_ttft_s, "tpot_s": suite.slo_tpot_s},
        "warm_prefix": suite.warm_prefix,
    }


def job_queue(*, suite: Suite, recipe: Recipe, host: Host, user, note: str = "") -> Job:
    from apps.benchmarks.tasks import run_job

    if not host.image_allowed(recipe.image):
        raise JobRefused(f"{host.name} does not allow the image {recipe.image}.")
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
