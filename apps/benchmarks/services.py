"""Queueing and cancelling benchmark jobs (what a queued job reads — its place in the
queue, the queue form's hints — is in apps/benchmarks/selectors.py; how a job ends, in
apps/benchmarks/lifecycle.py)."""

from __future__ import annotations

from django.db import transaction

from apps.benchmarks import lifecycle, live
from apps.benchmarks.models import Job, Suite
from apps.benchmarks.plans import plan_refusal
from apps.benchmarks.selectors import NEVER_OVERRIDES, can_cancel, suite_plan
from apps.benchmarks.tasks import run_job
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.services import Occupancy, RunRefused, admission_check


class JobRefused(Exception):
    """The job cannot be queued or changed; the message says why. `code` is run
    admission's where the job met it (host_busy, does_not_fit, …), else "refused"."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


# Refusals about the host's current state (the API answers 409); the others are about the
# request (422). The same split as for runs.
CONFLICTS = {"host_busy", "no_free_port", "not_enough_memory", "memory_unknown", "pinned",
             "host_retired"}  # fmt: skip


def job_admission(*, recipe: Recipe, host: Host, user) -> None:
    """Refuse up front what the worker would refuse seconds later, in run admission's own
    words. A host serving another recipe takes the job — it waits in the host's FIFO queue
    and swaps that run out at its turn (apps/benchmarks/runner.py) — unless that run is
    pinned (refused, "pinned"); so does a host that jobs for other recipes are queued on
    (each swaps in turn). When the job would start its recipe, every rule a run start meets
    applies — "does not fit" included, which a job never overrides; what the host holds
    now (busy, measured memory) only when nothing of another recipe holds it: otherwise
    the worker checks those after the swap."""
    retired = host.retired_refusal()  # before all else: it takes no new jobs
    if retired:
        raise JobRefused(retired, "host_retired")
    occupancy = Occupancy.of(host)
    pinned = occupancy.job_refusal(recipe.pk)
    if pinned is not None:
        raise JobRefused(pinned, "pinned")
    image_refusal = host.image_refusal(recipe.image)  # says how an admin allows it
    if image_refusal:
        raise JobRefused(image_refusal, "image_not_allowed")
    if occupancy.reusable(recipe.pk) and occupancy.waiting_for(recipe) is None:
        return  # the job reuses that run
    waits = occupancy.waiting_for(recipe) is not None
    try:
        admission_check(recipe=recipe, host=host, user=None, reuse=True, host_state=not waits)
    except RunRefused as exc:
        message = str(exc)
        if exc.code == "does_not_fit":
            message += NEVER_OVERRIDES
        raise JobRefused(message, exc.code) from None


def job_queue(*, suite: Suite, recipe: Recipe, host: Host, user, note: str = "") -> Job:
    job_admission(recipe=recipe, host=host, user=user)
    # Bounded by the recipe (apps/benchmarks/models.py): prompt + answer within its
    # max_model_len, and what each level builds within the harness's bounds.
    refusal = plan_refusal(
        suite.plan(), max_num_seqs=recipe.sequences, max_model_len=recipe.context_tokens
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


def job_cancel(*, job: Job, user) -> Job:
    """A queued job is cancelled at once; a running one stops after the request in flight
    and keeps what it measured."""
    if not can_cancel(job, user):
        raise JobRefused("Only the person who queued a job, or an operator, can cancel it.")
    return lifecycle.request_cancel(job, by=user)
