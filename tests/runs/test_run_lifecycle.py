"""Runs from queued to ready to stopped, against real sparksim servers: local processes
(process engine) and containers on a real Docker engine (Docker engine)."""

import threading
import time

import httpx
import pytest
from django.db import IntegrityError, transaction

from apps.hosts.engines import engine_for
from apps.runs import runner
from apps.runs.models import InvalidTransition, Run, RunState
from apps.runs.services import RunRefused, run_start, run_stop
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_starts_loads_warms_up_is_ready_and_stops(engine_host, qwen, operator):
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    assert run.state == RunState.QUEUED
    assert run.argv[:3] == ["vllm", "serve", "nvidia/Qwen3.5-35B-A3B-NVFP4"]
    assert "--gpu-memory-utilization" in run.argv
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log)
    assert {"starting", "loading", "compiling", "warming"} <= set(run.phase_seconds())
    assert run.facts["kv_cache_tokens"] > 100_000 and run.facts["max_concurrency"] > 1
    assert run.facts["sim_time_scale"] == engine_host.sim_time_scale  # its clock, recorded
    # The first request paid the JIT compile (12 s simulated for this profile), the last did
    # not. Against the cold one, not a figure: at 50× a 1 s warm TTFT is 20 wall ms, which
    # a busy machine's scheduler can take away (warm-up repeats until two agree, so one
    # stalled request is not the last).
    assert run.cold_ttft_s > 10 and run.warm_ttft_s < run.cold_ttft_s / 2
    models = f"http://127.0.0.1:{run.port}/v1/models"
    assert httpx.get(models, headers=run.upstream_headers).status_code == 200
    # The server demands the run's own key, given through its environment (the warm-up
    # above sent it); anyone else is refused, as real vLLM refuses them.
    assert run.api_key and run.api_key not in " ".join(run.argv)
    assert httpx.get(models).status_code == 401

    runner.stop(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.STOPPED
    assert engine_for(engine_host).list_managed() == []  # the container is removed
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{run.port}/v1/models", timeout=1)


def test_a_server_that_dies_at_startup_fails_the_run_with_its_reason_and_log(
    engine_host, too_long, operator
):
    # The planner says it does not fit: only an operator's typed override starts it, and
    # then vLLM (sparksim) refuses it with its own error.
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=too_long, host=engine_host, user=operator)
    assert refused.value.code == "does_not_fit"
    run = run_start(recipe=too_long, host=engine_host, user=operator,
                    fit_confirmation=too_long.name)  # fmt: skip
    assert run.fit_override_by == operator and run.fit_verdict == "does not fit"
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    assert "larger than the available KV cache memory" in run.failure_reason
    assert "max-model-len" in run.failure_advice
    assert "Available KV cache memory" in run.failure_log


def test_stopping_while_loading_stops_the_server(engine_host, qwen, operator):
    engine_host.sim_time_scale = 20  # ~10 s of loading
    engine_host.save()
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    worker = threading.Thread(target=runner.start, args=[run.pk])
    worker.start()
    wait_for(lambda: Run.objects.get(pk=run.pk).state == RunState.LOADING, 60, "loading")
    run_stop(run=Run.objects.get(pk=run.pk))
    worker.join(timeout=30)
    run.refresh_from_db()
    assert run.state == RunState.STOPPED


def test_one_active_run_per_host(sim_host, qwen, operator):
    run_start(recipe=qwen, host=sim_host, user=operator)
    with pytest.raises(RunRefused, match="already runs"):
        run_start(recipe=qwen, host=sim_host, user=operator)
    # ...and the database agrees even if admission control were bypassed.
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(recipe=qwen, host=sim_host, port=1, image="x")


def test_admission_refuses_when_measured_memory_is_short(sim_host, qwen, operator, tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       125000000 kB\nMemAvailable:    50000000 kB\n")
    sim_host.meminfo_path = str(meminfo)
    sim_host.save()
    with pytest.raises(RunRefused) as info:
        run_start(recipe=qwen, host=sim_host, user=operator)
    message = str(info.value)
    assert "51.2 GB available" in message and "needs 120.6 GB" in message
    assert not Run.objects.exists()


def test_admission_judges_a_host_by_its_own_agent_when_it_is_live(sim_host, qwen, operator):
    """A second Spark's memory is measured there by its host agent; the panel's own
    /proc/meminfo (or an idle simulated host) says nothing about it."""
    from django.utils import timezone

    sim_host.agent_seen_at = timezone.now()
    sim_host.agent_sample = {"mem_total": 125_000_000_000, "mem_available": 20_000_000_000}
    sim_host.save()
    with pytest.raises(RunRefused, match=r"20\.0 GB available") as info:
        run_start(recipe=qwen, host=sim_host, user=operator)
    assert info.value.code == "not_enough_memory"
    # … and says what would start there now, as the host page does (startable_now).
    from sparkdomain.planner.utilization import startable_now

    spec = sim_host.spec()
    panel, _ = startable_now(int(20e9), spec.cuda_visible_gib, spec.freeze_margin_gb)
    assert panel > 0 and f"the largest a start can ask for there now is {panel}" in str(info.value)
    # A stale agent is not believed: the panel's own reading (an idle simulated Spark) is.
    sim_host.agent_seen_at = timezone.now() - timezone.timedelta(minutes=5)
    sim_host.save()
    assert run_start(recipe=qwen, host=sim_host, user=operator).state == RunState.QUEUED


def test_the_state_machine_refuses_going_backwards(sim_host, qwen, operator):
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    run.transition(RunState.STARTING)
    with pytest.raises(InvalidTransition):
        run.transition(RunState.QUEUED)
    stale = Run.objects.get(pk=run.pk)
    run.transition(RunState.LOADING)
    with pytest.raises(InvalidTransition, match="changed state under us"):
        stale.transition(RunState.LOADING)


def test_a_redelivered_start_task_does_not_start_a_second_server(engine_host, qwen, operator):
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    runner.start(run.pk)  # redelivered after success: nothing to do
    run.refresh_from_db()
    assert run.state == RunState.READY
    assert len(engine_for(engine_host).list_managed()) == 1
    runner.stop(run.pk)
    time.sleep(0.1)


def test_a_host_that_asks_for_it_drops_the_page_cache_before_each_start(
    engine_host, qwen, operator, settings, tmp_path
):
    """Issue 40: NVIDIA's advice for a GB10 (vLLM's start gate reads MemAvailable), off by
    default, audited; a drop that fails is noted and the start goes on."""
    from apps.audit.models import AuditEntry
    from apps.hosts.models import Host

    proc = tmp_path / "drop_caches"
    settings.DROP_CACHES_PATH = str(proc)
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY and "page_cache" not in run.facts and not proc.exists()
    runner.stop(run.pk)

    Host.objects.filter(pk=engine_host.pk).update(drop_page_cache=True)
    engine_host.refresh_from_db()
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, run.failure_reason
    assert proc.read_text() == "3\n" and run.facts["page_cache"] == "dropped"
    assert AuditEntry.objects.filter(action="host.drop_caches").count() == 1
    runner.stop(run.pk)

    settings.DROP_CACHES_PATH = str(tmp_path / "no" / "such" / "file")
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY and run.facts["page_cache"].startswith("not dropped")
    runner.stop(run.pk)
