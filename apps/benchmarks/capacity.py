"""The capacity story with what was measured (apps/recipes/signals.py ``capacity``): the
recipe's plan, vLLM's measured KV capacity at a ready start, and the latest benchmark's
latency answer, put together by sparkdomain/capacity.py for the recipe and run pages."""

from __future__ import annotations

from apps.benchmarks.models import Job, JobState
from apps.benchmarks.selectors import capacity_answer
from apps.recipes.services import predicted_capacity
from apps.runs.models import PlanCheck
from sparkdomain.capacity import CapacityStory, MeasuredLatency


def story(recipe, run=None) -> CapacityStory:
    """With `run`: its own measured start and the benchmarks of it (else of its recipe on
    its host). Without: the recipe's latest measured start and benchmark since it last
    changed (a measurement of an older version of the recipe would not describe it)."""
    memory, memory_source = _measured_memory(recipe, run)
    return predicted_capacity(
        recipe.plan(),
        memory_measured=memory,
        memory_source=memory_source,
        latency_measured=_measured_latency(recipe, run),
    )


def _measured_memory(recipe, run) -> tuple[float | None, str]:
    if run is not None:
        value = (run.facts or {}).get("max_concurrency")
        return (float(value), "this run") if isinstance(value, int | float) else (None, "")
    check = (
        PlanCheck.objects.filter(
            recipe=recipe,
            quantity=PlanCheck.Quantity.MAX_CONCURRENCY,
            created_at__gte=recipe.updated_at,
        )
        .select_related("host")
        .first()
    )
    if check is None:
        return None, ""
    return check.measured, f"run {check.run_id} on {check.host.name}"


def _measured_latency(recipe, run) -> MeasuredLatency | None:
    jobs = Job.objects.filter(recipe=recipe, state=JobState.DONE).select_related("host")
    if run is not None:
        jobs = jobs.filter(run=run) if jobs.filter(run=run).exists() else jobs.filter(host=run.host)
    for job in jobs.order_by("-finished_at", "-pk")[:5]:
        answer = capacity_answer(job)
        # A sweep too short to time measured no latency at all: not "0 users".
        if answer is None or answer.get("slo_tps") is None or not answer.get("timed_levels"):
            continue
        when = job.finished_at.strftime("%b %-d") if job.finished_at else ""
        return MeasuredLatency(
            users=answer["users"],
            slo_ttft_s=answer["slo_ttft_s"],
            slo_tps=answer["slo_tps"],
            tested_up_to=answer["tested_up_to"],
            source=f"job {job.pk} on {job.host.name}" + (f", {when}" if when else ""),
            client_limited=answer.get("client_limited", ""),
            stale=bool(job.finished_at and job.finished_at < recipe.updated_at),
        )
    return None
