"""The host agent against real sparksim servers: live samples over a real WebSocket from a
real agent process, "unknown" instead of zeros when things break, history, and the memory
watchdog stopping a leaking run before the machine would freeze."""

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client

from apps.guard.agent import HostAgent
from apps.guard.watchdog import GIB
from apps.hosts.models import Host
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from apps.telemetry.models import HostSample, Incident
from sparkpanel.asgi import application
from tests.conftest import ROOT, child_env, stop_process, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _ready_run(host, recipe, user) -> Run:
    run = run_start(recipe=recipe, host=host, user=user)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, run.failure_reason
    return run


def _chat(run: Run, n: int = 3) -> None:
    for _ in range(n):
        httpx.post(f"http://127.0.0.1:{run.port}/v1/chat/completions", timeout=30,
                   headers=run.upstream_headers, json={
            "model": run.served_name, "max_tokens": 8,
            "messages": [{"role": "user", "content": "hello"}],
        }).raise_for_status()  # fmt: skip


def _agent_process(host, settings, tmp_path, *extra: str) -> subprocess.Popen:
    env = child_env(DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
                    SPARKPANEL_VAR_DIR=str(settings.VAR_DIR))  # fmt: skip
    log = (tmp_path / "agent.log").open("w")
    return subprocess.Popen(
        [sys.executable, "manage.py", "hostagent", "--host", host.name, *extra],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_samples_carry_memory_and_vllm_metrics_and_fill_the_history(sim_host, qwen, operator):
    run = _ready_run(sim_host, qwen, operator)
    agent = HostAgent(sim_host.name, bucket_s=0.5)
    agent.step()
    _chat(run)
    time.sleep(0.3)
    agent.next_scrape = 0  # scrape again now
    agent.step()
    sample = Host.objects.get(pk=sim_host.pk).agent_sample
    assert sample["run"] == run.pk
    assert sample["mem_available"] < sample["mem_total"]  # sparksim's simulated meminfo
    assert sample["mem_level"] in ("ok", "warn"), sample["mem_available"] / 2**30
    assert not sample["scrape_error"]
    assert sample["running"] == 0 and sample["kv_usage_pct"] is not None
    assert sample["generation_tps"] is not None and sample["generation_tps"] > 0
    assert sample["ttft_p50"] is not None
    time.sleep(0.6)
    agent.next_scrape = 0
    agent.step()
    rows = list(HostSample.objects.filter(host=sim_host))
    assert rows and all(row.run_id == run.pk and row.mem_available for row in rows)
    assert any(row.generation_tps for row in rows)
    assert Host.objects.get(pk=sim_host.pk).agent_live
    agent.close()
    runner.stop(run.pk)


def test_a_dead_scrape_target_gives_unknown_not_zero_and_the_agent_goes_on(
    sim_host, qwen, operator
):
    run = _ready_run(sim_host, qwen, operator)
    agent = HostAgent(sim_host.name)
    agent.step()
    runner.stop(run.pk)
    Run.objects.filter(pk=run.pk).update(state=RunState.READY)  # as if it died unseen
    agent.next_scrape = 0
    agent.step()
    sample = Host.objects.get(pk=sim_host.pk).agent_sample
    assert sample["stale"] is True and sample["scrape_error"].startswith("metrics:")
    for key in ("kv_usage_pct", "running", "generation_tps", "ttft_p50"):
        assert sample[key] is None  # unknown, never 0
    assert "metrics" in Host.objects.get(pk=sim_host.pk).agent_error
    agent.close()


def test_a_malformed_meminfo_is_an_alert_not_a_silent_ok(sim_host, tmp_path):
    bad = tmp_path / "meminfo"
    bad.write_text("MemTotal: lots\n")
    sim_host.meminfo_path = str(bad)
    sim_host.save()
    agent = HostAgent(sim_host.name)
    agent.step()
    sample = Host.objects.get(pk=sim_host.pk).agent_sample
    assert sample["mem_available"] is None and sample["mem_error"]
    [incident] = Incident.objects.filter(host=sim_host)
    assert incident.kind == Incident.Kind.ALERT and "meminfo" in incident.message.lower()
    agent.step()
    assert Incident.objects.filter(host=sim_host).count() == 1  # one alert, not one per poll
    agent.close()


@pytest.mark.services
def test_a_real_agent_process_pushes_live_samples_over_a_websocket(
    redis_url, sim_host, qwen, operator, member, settings, tmp_path
):
    run = _ready_run(sim_host, qwen, operator)
    agent = _agent_process(sim_host, settings, tmp_path, "--scrape-interval", "0.5")
    client = Client()
    client.force_login(member)
    headers = [(b"host", b"localhost"), (b"origin", b"http://localhost"),
               (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]  # fmt: skip

    async def receive(path: str, n: int) -> list[tuple[float, dict]]:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        try:
            out = []
            for _ in range(n):
                message = json.loads(await communicator.receive_from(timeout=10))
                out.append((time.time(), message["sample"]))
            return out
        finally:
            await communicator.disconnect()

    try:
        host_samples = async_to_sync(receive)(f"/ws/telemetry/host/{sim_host.name}/", 3)
        run_samples = async_to_sync(receive)(f"/ws/telemetry/run/{run.pk}/", 2)
    finally:
        stop_process(agent)
    for received_at, sample in host_samples + run_samples:
        assert sample["host"] == sim_host.name and sample["run"] == run.pk
        # Scrape → browser socket: the agent's clock against this test's, two processes that
        # a busy machine can each hold off the CPU for seconds; a stale sample is older.
        assert 0 <= received_at - sample["t"] < 10.0
        assert sample["mem_available"] is not None
    wait_for(lambda: not Host.objects.get(pk=sim_host.pk).agent_live, 10, "the agent shows stale")
    runner.stop(run.pk)


@pytest.mark.services
@pytest.mark.parametrize(
    "faults, rate, agent_args, forecast",
    [
        # 1 GB/s at 0.25 s polls: the forecast stops it before a reading crosses.
        ("mem-growth:1.2", 1e9, ["--memory-interval", "0.25"], True),
        # 5 GB/s at today's 0.5 s polls: 2.5 GB a poll. The two-poll rule alone reads
        # more than a gigabyte below the act line (inside the seed's 2–3 GB freeze band)...
        ("mem-growth:6", 5e9, ["--starting-memory-interval", "0.5", "--no-forecast"], False),
        # ... the forecast stops it on the trend, at the latest on the first reading below.
        ("mem-growth:6", 5e9, ["--starting-memory-interval", "0.5"], True),
    ],
    ids=["1GBps-forecast", "5GBps-two-poll-rule-only", "5GBps-forecast"],
)
def test_the_watchdog_stops_a_leaking_run_before_the_freeze_line(
    redis_url, sim_host, qwen, operator, settings, tmp_path, faults, rate, agent_args, forecast
):
    # sparksim's leak at 50× speed: 1.2 GB per simulated minute = 1 GB per wall second, in
    # a recipe that otherwise leaves ~11 GB free.
    sim_host.sim_faults = faults
    qwen.gpu_memory_utilization = "0.85"
    qwen.save()
    sim_host.save()
    # The agent watches the Spark all the time; then someone starts the leaking recipe.
    agent = _agent_process(sim_host, settings, tmp_path, *agent_args)
    wait_for(lambda: Host.objects.get(pk=sim_host.pk).agent_live, 30, "the agent", agent)
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    starter = threading.Thread(target=runner.start, args=[run.pk])
    starter.start()
    try:
        wait_for(lambda: Run.objects.get(pk=run.pk).state == RunState.FAILED, 60,
                 "the watchdog stops the run", agent)  # fmt: skip
    finally:
        stop_process(agent)
        starter.join(timeout=30)
    run.refresh_from_db()
    assert run.failure_reason.startswith("stopped by the memory watchdog")
    act = Incident.objects.get(host=sim_host, kind=Incident.Kind.ACT)
    assert act.run_id == run.pk and f"killed run {run.pk}" in act.action
    readings = [v for _, v in act.memory_curve if v is not None]
    act_bytes = sim_host.watchdog_act_gib * GIB
    below = [v for v in readings if v < act_bytes]
    print(f"{faults} forecast={forecast}: lowest reading {min(readings) / GIB:.2f} GiB, "
          f"{len(below)} below the {act_bytes / GIB:.2f} GiB line: {act.message}")  # fmt: skip
    if forecast:
        # Stopped on the trend: no reading below the line, or (polls running late) the first.
        assert "would cross the" in act.message and "falling" in act.message
        assert len(below) <= 1 and below == readings[len(readings) - len(below) :]
    else:
        # Stopped on the second poll below the line, a whole poll's fall past the first.
        assert act.message.endswith("for 2 polls: stopping the run")
        assert len(below) == 2 and min(readings) < act_bytes - 1e9
    # The server is gone.
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{run.port}/v1/models", timeout=1)
