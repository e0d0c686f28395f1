"""Several runs on one Spark (co-location, `Host.max_runs`): the host agent watches each
active run and the memory watchdog stops the least important one.

The choice itself (apps/guard/victim.py) and the watchdog's re-arm are pure and replayed
without Django. The agent is driven for real: each run's "server" is a small Python
process of its own (a process group, as the process engine starts vLLM) that serves
vLLM's /metrics and /health, the host's memory is a meminfo file this test writes, and
the agent's own `poll_memory` / `scrape_and_publish` are called with explicit times."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from datetime import timedelta

import psutil
import pytest
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import channel_layers
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.benchmarks.models import J, Job
from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.guard.agent import REARM_SETTLE_S, HostAgent
from apps.guard.live import guard_banners
from apps.guard.victim import Candidate, choose, idle_words
from apps.guard.watchdog import ACT, GIB, Watchdog
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.telemetry.groups import host_group, run_group
from apps.telemetry.models import HostSample, Incident
from tests.conftest import ROOT, ports

# --- the choice, pure ----------------------------------------------------------------------


def _c(run_id: int, **kw) -> Candidate:
    kw.setdefault("created", float(run_id))
    return Candidate(run_id=run_id, **kw)


def test_the_lowest_priority_goes_first():
    choice = choose([_c(1, priority=5, idle_s=9000), _c(2, priority=-5, idle_s=10),
                     _c(3, idle_s=5000)])  # fmt: skip
    assert choice.victim.run_id == 2 and choice.ranking == [2, 3, 1]
    assert choice.why == "lowest priority (-5; run 3: 0)" and not choice.protected


def test_at_one_priority_an_on_demand_run_goes_before_an_operators_start():
    manual = _c(1, idle_s=7200)  # idle longer, but an operator started it
    on_demand = _c(2, on_demand=True, idle_s=60)
    choice = choose([manual, on_demand])
    assert choice.victim.run_id == 2
    assert choice.why == "started on demand (run 1 by an operator; both priority 0)"
    # ...but a lower priority still goes first, whoever started it
    assert choose([_c(1, priority=-1), _c(2, on_demand=True)]).victim.run_id == 1


def test_then_the_one_idle_longest_then_the_newest():
    choice = choose([_c(1, idle_s=120), _c(2, idle_s=840), _c(3, idle_s=30)])
    assert choice.victim.run_id == 2 and choice.why == "idle 14 min (run 1: 2 min)"
    # Idle alike (to the second: two runs that never served a request): the newest.
    choice = choose([_c(1, idle_s=100.2), _c(2, idle_s=99.8), _c(3, idle_s=None)])
    assert choice.victim.run_id == 2 and choice.why == "the newest (after run 1)"
    assert [idle_words(s) for s in (45, 840, 9000)] == ["45 s", "14 min", "2.5 h"]


def test_pinned_and_benchmarked_runs_are_spared_while_another_can_go():
    pinned = _c(1, pinned=True, priority=-100, idle_s=9e9)
    measured = _c(2, jobs=(7,), priority=-100)
    plain = _c(3, priority=100, idle_s=0)
    choice = choose([pinned, measured, plain])
    assert choice.victim.run_id == 3 and not choice.protected
    assert choice.why == ("the only run not protected (run 1 is pinned; run 2 is in use by "
                          "benchmark job 7)")  # fmt: skip
    choice = choose([pinned, plain, _c(4, priority=100, idle_s=50)])
    assert choice.victim.run_id == 4 and choice.why == "idle 50 s (run 3: 0 s) (run 1 is pinned)"


def test_a_run_without_a_server_frees_nothing_and_goes_last_among_the_unprotected():
    queued = _c(2, has_server=False, priority=-100)
    choice = choose([_c(1, priority=50), queued])
    assert choice.victim.run_id == 1 and choice.why == "run 2 has no server yet"


def test_with_every_run_protected_the_newest_goes_anyway_and_says_so():
    choice = choose([_c(1, pinned=True), _c(3, jobs=(4, 5)), _c(2, pinned=True, jobs=(6,))])
    assert choice.victim.run_id == 3 and choice.protected and choice.ranking[0] == 3
    assert choice.why.startswith("every run here is protected (run 1 pinned; run 2 pinned and "
                                 "in use by benchmark job 6; run 3 in use by benchmark jobs 4, 5)")  # fmt: skip
    assert "the newest stopped anyway" in choice.why


def test_one_run_is_simply_that_run_and_none_is_none():
    choice = choose([_c(1, pinned=True)])
    assert choice.victim.run_id == 1 and choice.why == "" and not choice.protected
    assert choose([]) is None


def test_the_choice_imports_no_django():
    code = (
        "import sys, apps.guard.victim; "
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr or "django was imported"


# --- the watchdog decides again after a stop, one run at a time --------------------------


def test_after_a_stop_the_watchdog_stops_another_only_once_the_memory_had_time():
    dog = Watchdog(warn_bytes=8 * GIB, act_bytes=3 * GIB)
    low = 1 * GIB
    assert [dog.observe(low, t).stop_run for t in (0.0, 0.5)] == [False, True]
    dog.rearm(0.5, settle_s=2.0)
    # within the settle time: still low, nothing more
    assert not any(dog.observe(low, t).stop_run for t in (1.0, 1.5, 2.0))
    first, second = dog.observe(low, 2.5), dog.observe(low, 3.0)
    assert not first.stop_run and second.stop_run and second.level == ACT
    assert second.message.endswith("for 2 polls after a run was stopped: stopping another run")
    # once per rearm
    assert not any(dog.observe(low, 3.0 + t).stop_run for t in range(1, 10))
    # a re-armed watchdog whose memory came back stops nothing; recovery ends the episode
    dog.rearm(13.0, settle_s=0.0)
    assert not any(dog.observe(4 * GIB + GIB, 13.0 + t).stop_run for t in range(1, 4))
    assert dog.level != ACT
    dog.rearm(20.0)  # not in "act": nothing to arm
    assert [dog.observe(low, 20.0 + t).stop_run for t in (1, 2)] == [False, True]


# --- the agent, against real processes ----------------------------------------------------

# A stand-in for a vLLM server: /health, and /metrics with the gauges it is started with
# and token counters that grow by 100 a scrape.
FAKE_VLLM = r"""
import http.server, itertools, sys
running, waiting, kv = sys.argv[1], sys.argv[2], sys.argv[3]
scrapes = itertools.count()
LABELS = '{model_name="m",engine="0"}'
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b""
        elif self.path == "/metrics":
            n = next(scrapes) * 100
            body = "".join([
                "# TYPE vllm:num_requests_running gauge\n",
                f"vllm:num_requests_running{LABELS} {running}\n",
                "# TYPE vllm:num_requests_waiting gauge\n",
                f"vllm:num_requests_waiting{LABELS} {waiting}\n",
                "# TYPE vllm:kv_cache_usage_perc gauge\n",
                f"vllm:kv_cache_usage_perc{LABELS} {kv}\n",
                "# TYPE vllm:generation_tokens counter\n",
                f"vllm:generation_tokens_total{LABELS} {n}\n",
                "# TYPE vllm:prompt_tokens counter\n",
                f"vllm:prompt_tokens_total{LABELS} {2 * n}\n",
            ]).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

GB_KB = 10**6  # meminfo counts kB


@pytest.fixture
def servers():
    """`start(running, waiting, kv)`: a fake vLLM in a process group of its own, as the
    process engine starts one: (port, handle, process). All stopped at the end."""
    started: list[subprocess.Popen] = []

    def start(running: int = 0, waiting: int = 0, kv: float = 0.1):
        proc = subprocess.Popen(
            [sys.executable, "-c", FAKE_VLLM, str(running), str(waiting), str(kv)],
            stdout=subprocess.PIPE, start_new_session=True, text=True,
        )  # fmt: skip
        started.append(proc)
        port = int(proc.stdout.readline())
        handle = f"process:{proc.pid}:{psutil.Process(proc.pid).create_time()}"
        return port, handle, proc

    yield start
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()


@pytest.fixture
def spark(db, tmp_path):
    """A Spark that runs up to four models side by side, its memory a file we write."""
    meminfo = tmp_path / "meminfo"
    host = Host.objects.create(
        name="colo-spark", engine=Host.Engine.PROCESS, simulated=True, sim_time_scale=1,
        max_runs=4, meminfo_path=str(meminfo), **ports(21000, 21099),
    )  # fmt: skip
    host.meminfo = meminfo
    set_available(host, 60)
    return host


def set_available(host: Host, gb: float) -> None:
    host.meminfo.write_text(f"MemTotal: {128 * GB_KB} kB\nMemAvailable: {int(gb * GB_KB)} kB\n")


def mem_bytes(gb: float) -> int:
    return int(gb * GB_KB) * 1024  # as /proc/meminfo means it: kB are KiB


def _recipe(base: Recipe, name: str) -> Recipe:
    data = {k: v for k, v in base.__dict__.items() if not k.startswith("_") and k != "id"}
    data.update(slug=name.lower().replace(" ", "-"), name=name, served_model_name=name.lower())
    return Recipe.objects.create(**data)


def _run(host, recipe, *, slot, port, handle="", minutes_ago=60, idle_min=None, **fields) -> Run:
    """An active run; `idle_min`: ready that long ago and no request since (the gateway's
    idle clock falls back to the time it became ready)."""
    ready = timezone.now() - timedelta(minutes=idle_min if idle_min is not None else 1)
    run = Run.objects.create(
        recipe=recipe, host=host, slot=slot, port=port, handle=handle,
        state=fields.pop("state", RunState.READY),
        timings={RunState.READY: {"start": ready.isoformat()}}, **fields,
    )  # fmt: skip
    # Created in this order, `minutes_ago` apart: the newest has the latest created_at.
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
    run.refresh_from_db()
    return run


class Listener:
    """Channel-layer groups, as the browsers' sockets join them."""

    def __init__(self, *groups: str):
        self.layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        self.loop = asyncio.new_event_loop()
        self.channels = {}
        for group in groups:
            channel = self.loop.run_until_complete(self.layer.new_channel())
            self.loop.run_until_complete(self.layer.group_add(group, channel))
            self.channels[group] = channel

    def samples(self, group: str, n: int) -> list[dict]:
        async def get():
            out = []
            for _ in range(n):
                message = await asyncio.wait_for(self.layer.receive(self.channels[group]), 5)
                out.append(message["sample"])
            return out

        return self.loop.run_until_complete(get())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            for group, channel in self.channels.items():
                self.loop.run_until_complete(self.layer.group_discard(group, channel))
            self.loop.run_until_complete(self.layer.flush())
        self.loop.close()


@pytest.mark.django_db
def test_each_run_is_scraped_and_published_on_its_own_and_bucketed_per_run(
    redis_url, spark, qwen, servers
):
    other = _recipe(qwen, "Llama small")
    port_a, handle_a, _ = servers(running=2, waiting=0, kv=0.25)
    port_b, handle_b, _ = servers(running=0, waiting=3, kv=0.75)
    first = _run(spark, qwen, slot=0, port=port_a, handle=handle_a, minutes_ago=30)
    second = _run(spark, other, slot=1, port=port_b, handle=handle_b, minutes_ago=5)
    listener = Listener(host_group(spark.name), run_group(first.pk), run_group(second.pk))
    agent = HostAgent(spark.name, bucket_s=0.5, forecast=False)
    try:
        agent.poll_memory(100.0)
        agent.scrape_and_publish(100.0)
        agent.scrape_and_publish(101.0)  # rates need two scrapes
        sample = Host.objects.get(pk=spark.pk).agent_sample
        # The host: its memory, one entry per run (oldest first) ...
        assert sample["mem_available"] == mem_bytes(60) and sample["mem_total"] == mem_bytes(128)
        a, b = sample["runs"]
        assert (a["run"], a["run_state"], b["run"], b["run_state"]) == (
            first.pk, "ready", second.pk, "ready")  # fmt: skip
        assert (a["running"], a["waiting"], a["kv_usage_pct"]) == (2, 0, 25.0)
        assert (b["running"], b["waiting"], b["kv_usage_pct"]) == (0, 3, 75.0)
        assert a["generation_tps"] > 0 and b["generation_tps"] > 0
        assert not a["scrape_error"] and not b["scrape_error"]
        # ... and, at the top level as before, the first run's.
        assert sample["run"] == first.pk and sample["run_state"] == "ready"
        assert (sample["running"], sample["kv_usage_pct"]) == (2, 25.0)
        assert set(agent.derivers) == {first.pk, second.pk}
        assert agent.run_loading is False

        host_samples = listener.samples(host_group(spark.name), 2)
        assert [len(s["runs"]) for s in host_samples] == [2, 2]
        for run, running, waiting in ((first, 2, 0), (second, 0, 3)):
            got = listener.samples(run_group(run.pk), 2)
            assert {s["run"] for s in got} == {run.pk}
            assert all(s["mem_available"] == mem_bytes(60) for s in got)  # the host's memory
            assert (got[-1]["running"], got[-1]["waiting"]) == (running, waiting)  # its own
            assert "runs" not in got[-1]

        # 10-second buckets (0.5 s here): one row per run, each with the host's memory and
        # that run's numbers — the catalog's `busy` reads them per run.
        agent.scrape_and_publish(101.6)
        rows = {row.run_id: row for row in HostSample.objects.filter(host=spark)}
        assert set(rows) == {first.pk, second.pk}
        assert rows[first.pk].running == 2 and rows[first.pk].waiting == 0
        assert rows[second.pk].running == 0 and rows[second.pk].waiting == 3
        assert rows[first.pk].kv_usage_pct == 25.0 and rows[second.pk].kv_usage_pct == 75.0
        assert all(row.mem_available == mem_bytes(60) for row in rows.values())
        assert rows[first.pk].at == rows[second.pk].at
        assert catalog.busy(first) and catalog.busy(second)  # running, resp. waiting

        # A third run starting: memory is polled fast while ANY run loads; it has no
        # /metrics yet (nothing scraped) but its samples carry the host's memory.
        third = _run(
            spark, _recipe(qwen, "Tiny"), slot=2, port=9, minutes_ago=1, state=RunState.LOADING
        )
        sample = agent.scrape_and_publish(102.0)
        assert agent.run_loading is True and agent.interval == agent.starting_mem_interval
        assert [e["run"] for e in sample["runs"]] == [first.pk, second.pk, third.pk]
        assert sample["runs"][2] == {"run": third.pk, "run_state": "loading",
                                     "pair_worker": False, "scrape_error": ""}  # fmt: skip
        assert sample["run"] == first.pk
        assert third.pk not in agent.derivers

        # Runs that end are forgotten; with none left the host's row has no run.
        Run.objects.filter(pk__in=[first.pk, third.pk]).update(state=RunState.STOPPED)
        sample = agent.scrape_and_publish(103.0)
        assert sample["run"] == second.pk and [e["run"] for e in sample["runs"]] == [second.pk]
        assert set(agent.derivers) == {second.pk} and agent.run_loading is False
        assert set(agent.run_conditions) <= {second.pk}
        Run.objects.filter(pk=second.pk).update(state=RunState.STOPPED)
        sample = agent.scrape_and_publish(104.0)
        assert sample["run"] is None and sample["runs"] == [] and not agent.derivers
        agent.scrape_and_publish(105.0)
        newest = HostSample.objects.filter(host=spark).order_by("-at", "-pk").first()
        assert newest.run_id is None and newest.mem_available == mem_bytes(60)
    finally:
        agent.close()
        listener.close()


def _drive(agent: HostAgent, times, spark, gb: float) -> list:
    set_available(spark, gb)
    decisions = []
    for t in times:
        agent.poll_memory(t)
        decisions.append(agent.last_decision)
    return decisions


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def _killed(proc: subprocess.Popen) -> bool:
    """Gone within a few seconds (SIGKILL to its process group), reaped here."""
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.mark.django_db
def test_the_watchdog_stops_the_idle_low_priority_on_demand_run_and_leaves_the_pinned_one(
    redis_url, spark, qwen, servers, operator
):
    chat, helper = _recipe(qwen, "Chat big"), _recipe(qwen, "Helper")
    OnDemand.objects.create(recipe=chat, priority=10)
    OnDemand.objects.create(recipe=helper, priority=-5)
    port_p, handle_p, proc_p = servers()
    port_m, handle_m, proc_m = servers()
    port_d, handle_d, proc_d = servers()
    # Pinned, and idle for hours: never first.
    pinned = _run(spark, chat, slot=0, port=port_p, handle=handle_p, minutes_ago=300,
                  idle_min=240, pinned=True, pinned_by=operator)  # fmt: skip
    # An operator's start of a recipe outside the catalog: priority 0, idle 30 min.
    manual = _run(spark, qwen, slot=1, port=port_m, handle=handle_m, minutes_ago=60,
                  idle_min=30, started_by=operator)  # fmt: skip
    # Loaded on demand, priority -5, idle 14 min: the least important.
    idle = _run(spark, helper, slot=2, port=port_d, handle=handle_d, minutes_ago=20,
                idle_min=14, on_demand=True)  # fmt: skip
    agent = HostAgent(spark.name, forecast=False)
    try:
        _drive(agent, [0.0, 0.5], spark, 60)
        decisions = _drive(agent, [1.0, 1.5], spark, 1)  # below the act line, two polls
        assert [d.stop_run for d in decisions] == [False, True]

        idle.refresh_from_db()
        assert idle.state == RunState.FAILED and _killed(proc_d)
        assert _alive(proc_p) and _alive(proc_m)
        assert Run.objects.get(pk=pinned.pk).state == RunState.READY
        assert Run.objects.get(pk=manual.pk).state == RunState.READY
        why = f"lowest priority (-5; run {manual.pk}: 0) (run {pinned.pk} is pinned)"
        assert idle.failure_reason.startswith("stopped by the memory watchdog: ")
        assert idle.failure_reason.endswith(f"(chosen of 3 runs on this Spark: {why})")
        (act,) = Incident.objects.filter(host=spark, kind=Incident.Kind.ACT)
        assert act.run_id == idle.pk
        assert act.action.startswith(f"killed run {idle.pk} (Helper), chosen of 3 runs on this "
                                     f"Spark: {why} — process:{proc_d.pid}:")  # fmt: skip
        chosen = act.evidence["chosen"]
        assert chosen["run"] == idle.pk and chosen["ranking"] == [idle.pk, manual.pk, pinned.pk]
        assert {r["run"]: r["priority"] for r in chosen["runs"]} == {
            pinned.pk: 10, manual.pk: 0, idle.pk: -5}  # fmt: skip
        (audit,) = AuditEntry.objects.filter(action="run.kill")
        assert audit.target_id == str(idle.pk) and why in audit.message
        assert audit.source == "watchdog"
        (banner,) = [b for b in guard_banners() if b["host"] == spark.name]
        assert banner["level"] == ACT and why in banner["message"]

        # Still short of memory: the killed server's memory gets time to come back, then the
        # next poll decides again — one run a decision.
        settle = [1.5 + 0.5 * i for i in range(1, int(REARM_SETTLE_S / 0.5))]
        assert not any(d.stop_run for d in _drive(agent, settle, spark, 1))
        assert Run.objects.active().filter(host=spark).count() == 2
        later = [1.5 + REARM_SETTLE_S, 2.0 + REARM_SETTLE_S]
        assert [d.stop_run for d in _drive(agent, later, spark, 1)] == [False, True]
        manual.refresh_from_db()
        assert manual.state == RunState.FAILED and _killed(proc_m)
        second = Incident.objects.filter(kind=Incident.Kind.ACT).latest("pk")
        assert second.run_id == manual.pk
        assert f"the only run not protected (run {pinned.pk} is pinned)" in second.action
        assert "stopping another run" in second.message

        # The memory came back: the pinned run stays.
        _drive(agent, [5.0 + 0.5 * i for i in range(8)], spark, 60)
        assert Run.objects.get(pk=pinned.pk).state == RunState.READY and _alive(proc_p)
        assert Incident.objects.filter(kind=Incident.Kind.ACT).count() == 2
    finally:
        agent.close()


@pytest.mark.django_db
def test_with_every_run_protected_the_newest_is_stopped_and_the_action_says_so(
    redis_url, spark, qwen, servers, operator
):
    other = _recipe(qwen, "Bench model")
    port_p, handle_p, proc_p = servers()
    port_b, handle_b, proc_b = servers()
    pinned = _run(spark, qwen, slot=0, port=port_p, handle=handle_p, minutes_ago=60,
                  pinned=True, pinned_by=operator)  # fmt: skip
    measured = _run(spark, other, slot=1, port=port_b, handle=handle_b, minutes_ago=10)
    job = Job.objects.create(recipe=other, host=spark, run=measured, state=J.RUNNING)
    agent = HostAgent(spark.name, forecast=False)
    try:
        _drive(agent, [0.0, 0.5], spark, 60)
        assert [d.stop_run for d in _drive(agent, [1.0, 1.5], spark, 1)] == [False, True]
    finally:
        agent.close()
    measured.refresh_from_db()
    assert measured.state == RunState.FAILED and _killed(proc_b)
    assert Run.objects.get(pk=pinned.pk).state == RunState.READY and _alive(proc_p)
    (act,) = Incident.objects.filter(host=spark, kind=Incident.Kind.ACT)
    assert act.run_id == measured.pk and act.evidence["chosen"]["protected"] is True
    assert (f"every run here is protected (run {pinned.pk} pinned; run {measured.pk} in use by "
            f"benchmark job {job.pk}): the newest stopped anyway") in act.action  # fmt: skip
    assert "since a Spark that freezes loses them all" in act.action
    # The job measuring the run that was stopped is interrupted (what it measured kept).
    job.refresh_from_db()
    assert job.state == J.INTERRUPTED and "memory watchdog" in job.error


@pytest.mark.django_db
def test_a_failing_look_up_never_holds_the_kill(redis_url, spark, qwen, servers, monkeypatch):
    port_p, handle_p, proc_p = servers()
    port_n, handle_n, proc_n = servers()
    pinned = _run(spark, qwen, slot=0, port=port_p, handle=handle_p, minutes_ago=60, pinned=True)
    newer = _run(spark, _recipe(qwen, "Other"), slot=1, port=port_n, handle=handle_n,
                 minutes_ago=10)  # fmt: skip

    def broken(*args, **kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(HostAgent, "_look_up", broken)
    agent = HostAgent(spark.name, forecast=False)
    try:
        _drive(agent, [0.0, 0.5], spark, 60)
        assert [d.stop_run for d in _drive(agent, [1.0, 1.5], spark, 1)] == [False, True]
    finally:
        agent.close()
    assert Run.objects.get(pk=newer.pk).state == RunState.FAILED and _killed(proc_n)
    assert Run.objects.get(pk=pinned.pk).state == RunState.READY and _alive(proc_p)
