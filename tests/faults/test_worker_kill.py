"""Fault: a Spark's worker is killed (SIGKILL, the worker and its pool) in the middle of a
benchmark job. The job ends `interrupted` — never left `running`, never run a second time
— with the levels it measured before the kill kept (once each). The model server it was
measuring keeps running and stays the host's only one, and the next worker runs the job
queued behind it to `done` on that same server.

The same holds when the worker dies while the job is still *preparing* — loading the model
it was asked to benchmark: the next job adopts the half-started server (never a second
one) and runs on it, and the interrupted job keeps no results. (A worker killed during a
plain run start, without a job, is tests/runs/test_worker_crash.py.)

The job's second scenario streams 8 tokens and then stalls (sparksim's `stall` fault) for
8 s: a deterministic window in which the job is measuring, one level stored, the next in
flight. The host runs sparksim 200× faster than a Spark, so the model loads in ~2 s.
"""

from collections import Counter

import pytest

from apps.benchmarks.models import J, Job, Result
from apps.benchmarks.services import job_queue
from apps.benchmarks.tasks import run_job
from apps.hosts.engines import engine_for
from apps.hosts.engines.base import State
from apps.runs import runner as run_runner
from apps.runs.models import Run, RunState
from apps.runs.tasks import reconcile_all
from tests.conftest import kill_worker_tree, wait_for
from tests.faults.conftest import sim_servers, tiny_suite, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _job(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def _results(job: Job) -> list[tuple]:
    return list(
        Result.objects.filter(job=job)
        .order_by("pk")
        .values_list("pk", "kind", "scenario", "concurrency", "complete")
    )


def _next_worker_runs_the_queue(start_worker, sim_host, env, first, second) -> None:
    """A new worker for the host (its start-up reconcile, then the periodic one as beat
    sends it): the killed job ends interrupted and the next one runs to done."""
    start_worker(sim_host.queue, sim_host.name + "-2", **env)
    reconcile_all()
    wait_for(
        lambda: (_job(first).state, _job(second).state) == (J.INTERRUPTED, J.DONE),
        60,
        "the first job interrupted and the second done",
    )


def test_a_worker_killed_mid_job_interrupts_it_once_and_the_host_runs_the_next_job(
    start_worker, sim_host, qwen, member, operator, settings
):
    sim_host.sim_time_scale = 200
    sim_host.sim_faults = "stall:1600@8"  # 8 s (wall) after the 8th token of every stream
    sim_host.save()
    long = tiny_suite("kill: long", ("first", 32, 2), ("stalls", 32, 16), ("never", 32, 2))
    short = tiny_suite("kill: short", ("only", 32, 2))  # 2 tokens: never reaches the stall
    env = worker_env(settings)
    node = start_worker(sim_host.queue, sim_host.name, **env)
    first = job_queue(suite=long, recipe=qwen, host=sim_host, user=member)
    second = job_queue(suite=short, recipe=qwen, host=sim_host, user=operator)

    def measuring() -> bool:
        job = _job(first)
        return job.state == J.RUNNING and job.results.exists() and job.progress.get("done", 0) > 0

    wait_for(measuring, 60, "the first job measuring, one level stored")
    before = _job(first)
    kept = _results(first)
    kill_worker_tree(start_worker.processes[node])

    # Nobody works for the host now: the job still says running, the next one waits.
    assert [r[2] for r in kept] == ["first"]
    assert (_job(first).state, _job(second).state) == (J.RUNNING, J.QUEUED)
    run = Run.objects.get(pk=before.run_id)
    assert run.state == RunState.READY  # the job started the recipe, and it is still there
    engine = engine_for(sim_host)
    [server] = engine.list_managed()
    assert str(server.handle) == run.handle and server.status.state is State.RUNNING

    _next_worker_runs_the_queue(start_worker, sim_host, env, first, second)
    after, second = _job(first), _job(second)
    assert "stopped in the middle" in after.error
    assert after.started_at == before.started_at  # executed once: never restarted
    assert after.finished_at is not None and after.run_id == run.pk
    assert _results(first) == kept  # what it measured is kept, nothing added, nothing twice
    rows = Counter(Result.objects.values_list("job", "kind", "scenario", "concurrency"))
    assert set(rows.values()) == {1}
    assert second.run_id == run.pk and second.started_at > before.started_at
    assert [r[2] for r in _results(second)] == ["only"]

    # Redis hands an unacknowledged message out again after its visibility timeout: that
    # redelivery of the killed job's task reaches the worker and changes nothing.
    run_job.apply_async(args=[first.pk], queue=sim_host.queue).get(timeout=30)
    again = _job(first)
    assert (again.state, again.started_at, again.finished_at) == (
        J.INTERRUPTED,
        before.started_at,
        after.finished_at,
    )
    assert _results(first) == kept

    # One model server for the host, the run's own: no second sparksim was started.
    assert Run.objects.count() == 1 and Run.objects.get(pk=run.pk).state == RunState.READY
    assert [str(m.handle) for m in engine.list_managed()] == [run.handle]
    assert len(sim_servers(sim_host)) == 1
    run_runner.stop(run.pk)
    assert sim_servers(sim_host) == []


def test_a_worker_killed_while_a_job_loads_its_model_leaves_one_server_for_the_next_job(
    start_worker, sim_host, qwen, member, operator, settings
):
    sim_host.sim_time_scale = 50  # a ~5 s load: long enough to kill the worker in the middle
    sim_host.save()
    suite = tiny_suite("kill: prepare", ("only", 32, 2))
    env = worker_env(settings)
    node = start_worker(sim_host.queue, sim_host.name, **env)
    first = job_queue(suite=suite, recipe=qwen, host=sim_host, user=member)
    second = job_queue(suite=suite, recipe=qwen, host=sim_host, user=operator)
    wait_for(
        lambda: Run.objects.filter(state=RunState.LOADING).exists(), 60, "the job's model loading"
    )
    before = _job(first)
    run = Run.objects.get()
    kill_worker_tree(start_worker.processes[node])
    assert (before.state, _job(second).state) == (J.PREPARING, J.QUEUED)
    engine = engine_for(sim_host)
    [server] = engine.list_managed()
    assert str(server.handle) == run.handle and server.status.state is State.RUNNING

    _next_worker_runs_the_queue(start_worker, sim_host, env, first, second)
    after, second = _job(first), _job(second)
    assert after.started_at == before.started_at and not after.results.exists()
    assert [r[2] for r in _results(second)] == ["only"]
    # The next job adopted the half-started server: the same run, the same process.
    assert second.run_id == run.pk and Run.objects.count() == 1
    adopted = Run.objects.get(pk=run.pk)
    assert adopted.state == RunState.READY and adopted.handle == run.handle
    assert [str(m.handle) for m in engine.list_managed()] == [run.handle]
    assert len(sim_servers(sim_host)) == 1
    run_runner.stop(run.pk)
