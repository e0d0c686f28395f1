"""The host agent against a real sparksim that hangs (its `hang` fault: requests running,
no token, /health 200): the hang is caught from /metrics within the recipe's stall time,
recorded with its evidence, and the recipe's policy applies — alert only, or a restart
(with backoff) until the limit of restarts in a row."""

import threading
import time

import httpx
import pytest

from apps.audit.models import AuditEntry
from apps.guard.agent import HostAgent, _hang_restarts
from apps.guard.hang import STALLED, Hang
from apps.recipes.models import HangPolicy
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from apps.telemetry.models import Incident

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _hanging_run(host, recipe, user) -> Run:
    # The warm-up's tokens (a few requests of 2) come first; the engine hangs after 40.
    host.sim_faults = "hang:40"
    host.save()
    run = run_start(recipe=recipe, host=host, user=user)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, run.failure_reason
    return run


def _stream_until_it_hangs(run: Run) -> threading.Thread:
    """A long answer in the background: it stops mid-way and stays 'running'."""

    def ask() -> None:
        try:
            with httpx.stream("POST", f"http://127.0.0.1:{run.port}/v1/completions",
                              headers=run.upstream_headers, timeout=httpx.Timeout(60, read=20),
                              json={"model": run.served_name, "prompt": "x", "max_tokens": 400,
                                    "ignore_eos": True, "stream": True}) as answer:  # fmt: skip
                for _ in answer.iter_lines():
                    pass
        except httpx.HTTPError:
            pass

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def _scrape_until(agent: HostAgent, done, seconds: float) -> float:
    """Scrape with the agent's clock stepping 1 s a call (the detector counts what it is
    told), until `done()` or `seconds` of it have passed; returns the time it took."""
    for t in range(int(seconds) + 1):
        agent.scrape_and_publish(1000.0 + t)
        if done():
            return float(t)
    raise AssertionError(f"nothing after {seconds} s")


def test_a_hung_run_is_caught_and_alerted_once(redis_url, sim_host, qwen, operator):
    run = _hanging_run(sim_host, qwen, operator)
    HangPolicy.objects.create(recipe=qwen, stall_s=15)  # alert only
    _stream_until_it_hangs(run)
    agent = HostAgent(sim_host.name)
    try:
        took = _scrape_until(
            agent, lambda: Incident.objects.filter(kind=Incident.Kind.HANG).exists(), 60
        )
        for t in range(30):  # the same episode: no second incident
            agent.scrape_and_publish(2000.0 + t)
    finally:
        agent.close()
    (incident,) = Incident.objects.filter(kind=Incident.Kind.HANG)
    assert took >= 15 and incident.evidence["stalled_s"] >= 15  # never before the stall time
    assert incident.run_id == run.pk and incident.action == "alert only (the recipe's hang policy)"
    assert incident.evidence["running"] == 1 and incident.evidence["health_ok"] is True
    assert incident.evidence["generation_tokens"] >= 40
    assert "no token generated for" in incident.message
    run.refresh_from_db()
    assert run.state == RunState.READY  # alert only: nothing stopped


def test_the_restart_policy_restarts_a_hung_run_after_its_backoff(
    redis_url, sim_host, qwen, operator
):
    run = _hanging_run(sim_host, qwen, operator)
    HangPolicy.objects.create(recipe=qwen, stall_s=10, action=HangPolicy.Action.RESTART,
                              max_restarts=2, backoff_s=30)  # fmt: skip
    _stream_until_it_hangs(run)
    agent = HostAgent(sim_host.name)
    try:
        _scrape_until(agent, lambda: Incident.objects.filter(kind=Incident.Kind.HANG).exists(), 60)
    finally:
        agent.close()
    (incident,) = Incident.objects.filter(kind=Incident.Kind.HANG)
    assert incident.action == "restarting it (restart 1 of 2, in 30 s)"
    run.refresh_from_db()
    assert run.state == RunState.STOPPING and run.step == "Stopping to restart"
    restart = AuditEntry.objects.get(action="run.restart", target_id=str(run.pk))
    assert restart.source == "watchdog" and restart.message.startswith("hung: ")


def test_a_long_prefill_is_not_called_a_hang(redis_url, sim_host, qwen, operator, monkeypatch):
    """A 120,000-token prompt on a real sparksim (Qwen3.5-35B's prefill: ~27 simulated
    seconds, 2.7 s at ×10) under a 1 s stall time: one request running and no token for
    the whole prefill. As on real vLLM only the KV cache moves, chunk by chunk; the agent
    reads that as progress and calls nothing a hang. The prefill allowance is switched off
    here (it alone would cover this prompt: 131,072 tokens at 200 tok/s, 66 s at ×10), so
    the test holds the metrics' path: sparksim's /metrics, the agent's scrape, the rule."""
    sim_host.sim_time_scale = 10
    sim_host.save()
    qwen.max_model_len = 131_072
    qwen.save()
    # 1 s: below the form's 10 s minimum (the detector takes any positive time).
    HangPolicy.objects.create(recipe=qwen, stall_s=1)
    monkeypatch.setattr("apps.guard.agent.prefill_allowance_s", lambda *a, **k: 0.0,
                        raising=False)  # fmt: skip
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, run.failure_reason
    answers: list[dict] = []

    def ask() -> None:
        body = {"model": run.served_name, "prompt": [11 + i % 30_000 for i in range(120_000)],
                "max_tokens": 1}  # fmt: skip
        answers.append(httpx.post(f"http://127.0.0.1:{run.port}/v1/completions", json=body,
                                  headers=run.upstream_headers, timeout=60).json())  # fmt: skip

    agent = HostAgent(sim_host.name)
    thread = threading.Thread(target=ask, daemon=True)
    started = time.monotonic()
    thread.start()
    busy = []
    try:
        while thread.is_alive():
            sample = agent.scrape_and_publish(time.monotonic())
            if sample["running"] == 1:
                busy.append(sample)
            time.sleep(0.1)
        took = time.monotonic() - started
        agent.scrape_and_publish(time.monotonic())
    finally:
        agent.close()
    assert answers and answers[0]["usage"]["prompt_tokens"] == 120_000
    # running, no token, for well over the stall time: today's rule's worst case
    assert took > 2 and len(busy) >= 5
    assert all(not s["generation_tps"] for s in busy[1:-1])
    assert not Incident.objects.filter(kind=Incident.Kind.HANG).exists()


def test_restarts_in_a_row_stop_at_the_policys_limit(sim_host, qwen, operator):
    """Each restart doubles the wait; after `max_restarts` hang restarts in a row the agent
    only alerts."""
    policy = HangPolicy.objects.create(recipe=qwen, action=HangPolicy.Action.RESTART,
                                       max_restarts=2, backoff_s=30)  # fmt: skip
    assert [policy.restart_delay_s(n) for n in range(3)] == [30, 60, None]
    first = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.FAILED, port=9)
    Incident.objects.create(host=sim_host, run=first, kind="hang", message="x",
                            action="restarting it (restart 1 of 2, in 30 s)",
                            at=first.created_at)  # fmt: skip
    second = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.FAILED, port=9,
                                restart_of=first)  # fmt: skip
    Incident.objects.create(host=sim_host, run=second, kind="hang", message="x",
                            action="restarting it (restart 2 of 2, in 60 s)",
                            at=first.created_at)  # fmt: skip
    third = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.READY, port=9,
                               restart_of=second)  # fmt: skip
    assert _hang_restarts(third) == 2
    agent = HostAgent(sim_host.name)
    try:
        agent.on_hang(third, Hang(STALLED, "1 request(s) running and no token", {}), policy)
    finally:
        agent.close()
    last = Incident.objects.filter(run=third).get()
    assert last.action.startswith("not restarted: it was restarted 2 time(s) in a row")
    third.refresh_from_db()
    assert third.state == RunState.READY
    # A restart that was not for a hang breaks the chain.
    fourth = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.FAILED, port=9,
                                restart_of=Run.objects.create(recipe=qwen, host=sim_host,
                                                              state=RunState.STOPPED, port=9))  # fmt: skip
    assert _hang_restarts(fourth) == 0


@pytest.mark.django_db
def test_the_allowance_is_one_prefill_step_with_chunked_prefill_else_the_longest_prompt(qwen):
    from apps.guard.agent import _longest_step
    from apps.guard.hang import prefill_allowance_s

    run = Run(recipe=qwen, facts={"max_model_len": 131072})
    assert _longest_step(run) == 131072  # one step may prefill the whole prompt
    run.facts["max_num_batched_tokens"] = 8192
    assert _longest_step(run) == 8192  # KV usage moves between the chunks
    assert prefill_allowance_s(_longest_step(run)) < prefill_allowance_s(131072) / 10
