"""A benchmark job for a recipe the host is not serving swaps the host's run out at its turn
(issue #22, point 7): against real sparksim servers, through the worker's own code
(`runner.run_job`, as the host's Celery task calls it)."""

import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from apps.benchmarks import runner
from apps.benchmarks.models import J, Job
from apps.benchmarks.selectors import queue_entry
from apps.benchmarks.services import job_queue
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs import runner as run_runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from sparkdomain.spark import GB

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small_suite(quick_suite):
    """One scenario and one sweep level: the swap is what is tested, not the numbers."""
    quick_suite.sweep_levels = [1]
    quick_suite.requests_per_level = 2
    quick_suite.repetitions = 1
    quick_suite.save()
    return quick_suite


def copy_of(recipe: Recipe, slug: str, name: str) -> Recipe:
    """Another recipe of the same small model (sparksim starts it as fast)."""
    fields = {f.name: getattr(recipe, f.name) for f in Recipe._meta.concrete_fields}
    fields.pop("id")
    return Recipe.objects.create(**{**fields, "slug": slug, "name": name})


def serving(host) -> set[str]:
    """The handles of the servers running on the host now."""
    return {str(managed.handle) for managed in engine_for(host).list_managed()}


def test_jobs_swap_the_hosts_run_for_their_recipe_in_turn(
    sim_host, qwen, small_suite, member, operator
):
    other = copy_of(qwen, "qwen-other", "Qwen other")
    old = run_start(recipe=other, host=sim_host, user=operator)
    run_runner.start(old.pk)  # as the host's worker does
    old.refresh_from_db()
    assert old.state == RunState.READY, old.failure_reason
    old_server = old.handle
    assert old_server in serving(sim_host)

    # Queued on a host serving another recipe: accepted, waiting; and a job behind it for
    # the recipe being swapped out (FIFO: each swaps in turn).
    job = job_queue(suite=small_suite, recipe=qwen, host=sim_host, user=member)
    back = job_queue(suite=small_suite, recipe=other, host=sim_host, user=member)
    assert queue_entry(job).waiting == (
        f"waiting for {sim_host.name} to be free: it runs “Qwen other” (ready); when this "
        "job's turn comes, it stops that run and starts “Qwen test”."
    )
    assert queue_entry(back).waiting.startswith(
        f"waiting for {sim_host.name} to be free: a benchmark job for “Qwen test” ahead of it"
    )

    runner.run_job(job.pk)
    job.refresh_from_db()
    old.refresh_from_db()
    assert job.state == J.DONE, job.error
    assert (old.state, old.stop_reason) == (
        RunState.STOPPED, f"stopped to run benchmark job {job.pk}")  # fmt: skip
    assert old_server not in serving(sim_host)  # the old server is gone, not just marked
    new = job.run
    assert (new.recipe, new.state) == (qwen, RunState.READY) and new.pk != old.pk
    assert job.results.exists()

    runner.run_job(back.pk)
    back.refresh_from_db()
    new.refresh_from_db()
    assert back.state == J.DONE, back.error
    assert (new.state, new.stop_reason) == (
        RunState.STOPPED, f"stopped to run benchmark job {back.pk}")  # fmt: skip
    assert (back.run.recipe, back.run.state) == (other, RunState.READY)
    assert serving(sim_host) == {back.run.handle}  # one model at a time, all along
    assert Run.objects.active().count() == 1
    run_runner.stop(back.run_id)


def test_a_job_waits_for_a_run_that_is_stopping_then_starts_its_recipe(
    sim_host, qwen, small_suite, member, operator
):
    """An operator's stop whose task is still queued behind the job (the host's worker does
    one thing at a time): the job stops the server itself, and records no reason of its own."""
    old = run_start(recipe=qwen, host=sim_host, user=operator)
    run_runner.start(old.pk)
    old.refresh_from_db()
    assert old.state == RunState.READY, old.failure_reason
    old.transition(RunState.STOPPING, step="Stopping")  # the operator's stop, its task not yet run
    job = job_queue(suite=small_suite, recipe=qwen, host=sim_host, user=member)
    assert queue_entry(job).waiting.startswith(
        f"waiting for {sim_host.name} to be free: its run of “Qwen test” is stopping"
    )
    runner.run_job(job.pk)
    job.refresh_from_db()
    old.refresh_from_db()
    assert job.state == J.DONE, job.error
    assert (old.state, old.stop_reason) == (RunState.STOPPED, "")
    assert job.run_id != old.pk and job.run.state == RunState.READY
    assert Job.objects.get(pk=job.pk).run.recipe == qwen
    run_runner.stop(job.run_id)


def test_after_a_swap_the_start_waits_for_the_memory_to_be_given_back(
    sim_host, qwen, small_suite, member
):
    """The host agent's sample still shows the old model's memory for a moment after its
    server stopped: the job's start asks again (the host read afresh) instead of failing."""
    other = copy_of(qwen, "qwen-other", "Qwen other")
    old = Run.objects.create(recipe=other, host=sim_host, port=sim_host.port_min, image="x",
                             state=RunState.READY)  # fmt: skip
    total = int(sim_host.physical_memory_gb * GB)

    def agent_says(available_gb: float) -> None:  # as apps/guard/agent.py stores its sample
        Host.objects.filter(pk=sim_host.pk).update(
            agent_seen_at=timezone.now(),
            agent_sample={"mem_total": total, "mem_available": int(available_gb * GB)},
        )

    agent_says(8)  # the old model still holds it
    job = job_queue(suite=small_suite, recipe=qwen, host=sim_host, user=member)
    seen: list[str] = []

    def agent() -> None:
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                step = Job.objects.get(pk=job.pk).progress.get("step", "")
                if step.startswith(f"Waiting for {sim_host.name}'s memory to be given back"):
                    seen.append(step)
                    break
                agent_says(8)  # still measuring the old model's memory, live
                time.sleep(0.2)
            agent_says(120)  # the memory is back
        finally:
            connection.close()

    thread = threading.Thread(target=agent)
    thread.start()
    runner.run_job(job.pk)
    thread.join(timeout=130)
    job.refresh_from_db()
    old.refresh_from_db()
    assert seen and "has 8.0 GB available" in seen[0], seen
    assert job.state == J.DONE, job.error
    assert (old.state, old.stop_reason) == (
        RunState.STOPPED, f"stopped to run benchmark job {job.pk}")  # fmt: skip
    assert (job.run.recipe, job.run.state) == (qwen, RunState.READY)
    run_runner.stop(job.run_id)
