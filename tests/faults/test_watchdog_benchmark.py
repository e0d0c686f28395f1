"""Fault 5: memory grows to the watchdog's line while a benchmark runs. The host agent (a
real `manage.py hostagent` process) kills the model server, the job ends `interrupted` by
the watchdog with the levels measured before the kill kept, and an incident is recorded.
"""

import threading

import httpx
import pytest

from apps.benchmarks.models import J, Job, Suite
from apps.benchmarks.runner import run_job
from apps.benchmarks.services import job_queue
from apps.hosts.models import Host
from apps.runs.models import RunState
from apps.telemetry.models import Incident
from tests.conftest import stop_process, wait_for
from tests.guard.test_agent import _agent_process

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def test_the_watchdog_interrupts_a_running_benchmark_and_keeps_what_it_measured(
    redis_url, sim_host, qwen, member, settings, tmp_path
):
    # A slow leak: the model loads and the benchmark measures a level or two before the
    # host's MemAvailable reaches the act line (3 GiB). The leak runs on the simulated
    # clock; the client's and server's own CPU work does not: at x50 a loaded CI machine
    # (stress-ng on one of two cores) reached the act line 7 s after ready, before one
    # level was measured. At x10 the same leak leaves five times the wall time.
    sim_host.sim_time_scale = 10
    sim_host.sim_faults = "mem-growth:1.5"
    sim_host.save()
    qwen.gpu_memory_utilization = "0.80"
    qwen.save()
    suite = Suite.objects.create(
        name="long sweep", scenarios=[{"name": "short", "prompt_tokens": 100, "output_tokens": 64}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=200, sweep_output_tokens=256,
        sweep_levels=[1, 2, 4, 8, 16, 32], requests_per_level=16,
    )  # fmt: skip
    job = job_queue(suite=suite, recipe=qwen, host=sim_host, user=member)
    agent = _agent_process(sim_host, settings, tmp_path, "--memory-interval", "0.25")
    worker = threading.Thread(target=run_job, args=[job.pk])
    try:
        wait_for(lambda: Host.objects.get(pk=sim_host.pk).agent_live, 30, "the agent", agent)
        worker.start()
        wait_for(lambda: Job.objects.get(pk=job.pk).state == J.INTERRUPTED, 120,
                 "the watchdog interrupts the job", agent)  # fmt: skip
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        stop_process(agent)
        worker.join(timeout=30)

    job.refresh_from_db()
    assert job.state == J.INTERRUPTED  # the runner's own ending did not overwrite it
    assert job.error.startswith("Interrupted by the memory watchdog")
    assert job.finished_at is not None
    run = job.run
    assert run.state == RunState.FAILED
    assert run.failure_reason.startswith("stopped by the memory watchdog")
    act = Incident.objects.get(host=sim_host, kind=Incident.Kind.ACT)
    assert act.run_id == run.pk and f"killed run {run.pk}" in act.action
    # It was measuring (not loading) when the watchdog acted, and what it measured before is
    # kept, each level once; the sweep did not finish.
    results = list(job.results.all())
    keys = [(r.kind, r.scenario, r.concurrency) for r in results]
    assert keys and len(keys) == len(set(keys))
    # Levels stored after the kill are the one in flight, marked as cut short.
    late = [r for r in results if r.created_at > job.finished_at]
    assert len(late) <= 1 and all(not r.complete for r in late)
    assert any(r.complete and r.failed == 0 for r in results)
    assert len([k for k in keys if k[0] == "sweep"]) < len(suite.sweep_levels)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{run.port}/v1/models", timeout=1)
