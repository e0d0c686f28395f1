"""apps.guard.conditions (replayed) and the agent's use of it: KV cache above 90 % for a
minute and preemptions become one incident per episode, which reaches subscribers."""

from __future__ import annotations

import pytest

from apps.guard.agent import HostAgent
from apps.guard.conditions import RunConditions
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.telemetry.models import Incident


def test_kv_above_90_for_a_minute_alerts_once_per_episode():
    watch = RunConditions()
    fired = []
    for t in range(400):
        kv = 95.0 if t < 100 or 160 <= t < 300 else 50.0
        fired += [(t, a.rule) for a in watch.observe(float(t), {"kv_usage_pct": kv})]
    # 0–99 high: alerts at 60; 100–159 low (60 s, under the 300 s clear time); 160–299
    # high again: the same episode, no second alert
    assert fired == [(60, "kv_high")]
    fired = []
    for t in range(400, 1200):  # quiet from 300 to 700: cleared; high again from 700
        kv = 95.0 if t >= 700 else 40.0
        fired += [(t, a.rule) for a in watch.observe(float(t), {"kv_usage_pct": kv})]
    assert fired == [(760, "kv_high")]


def test_a_short_spike_and_unknown_readings_do_not_alert():
    watch = RunConditions()
    samples = [{"kv_usage_pct": 99.0}] * 59 + [{"kv_usage_pct": None}] * 30 + [{}] * 30
    assert not any(watch.observe(float(t), s) for t, s in enumerate(samples))


def test_preemptions_alert_at_once_and_once_per_episode():
    watch = RunConditions()
    rules = []
    for t in range(700):
        preempted = 3.0 if t in (10, 11, 12, 200, 650) else 0.0
        rules += [(t, a.rule) for a in watch.observe(float(t), {"preemptions": preempted})]
    assert rules == [(10, "preemptions"), (650, "preemptions")]  # 200: within 300 s of quiet


@pytest.mark.django_db
def test_the_agent_records_each_alert_as_one_incident(sim_host, qwen):
    run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.READY, port=9)
    agent = HostAgent(sim_host.name)
    try:
        for t in range(200):
            agent.watch_conditions(run, 1000.0 + t, {"kv_usage_pct": 97.5, "preemptions": 0.0})
    finally:
        agent.close()
    (incident,) = Incident.objects.filter(kind=Incident.Kind.ALERT)
    assert incident.run_id == run.pk and incident.evidence == {"rule": "kv_high"}
    assert incident.message == (f"Run {run.pk} (Qwen test): KV cache at 98 % for over 60 s: "
                                "requests queue, vLLM preempts")  # fmt: skip


def test_ttft_over_the_recipes_slo_for_five_minutes_alerts_once():
    watch = RunConditions(ttft_slo_s=2.0)
    fired = [(t, a.message) for t in range(700)
             for a in watch.observe(float(t), {"ttft_p95": 3.5 if t >= 100 else 1.0})]  # fmt: skip
    assert fired == [(400, "TTFT p95 3.50 s over the recipe's SLO of 2 s for 5 min")]
    none = RunConditions()  # no SLO set: never
    assert not any(none.observe(float(t), {"ttft_p95": 99.0}) for t in range(1000))


@pytest.mark.django_db
def test_a_real_spark_low_on_disk_is_one_incident_per_episode(settings, tmp_path):
    host = Host.objects.create(name="real-spark", engine=Host.Engine.PROCESS, simulated=False,
                               hf_cache_path=str(tmp_path), port_min=30000, port_max=30099)  # fmt: skip
    settings.GUARD_DISK_MIN_FREE_GB = 10**9  # more than any disk: "low"
    agent = HostAgent(host.name)
    try:
        for t in range(5):
            agent.watch_disk(float(t))
        settings.GUARD_DISK_MIN_FREE_GB = 0.001  # fine again
        agent.watch_disk(10.0)
    finally:
        agent.close()
    (incident,) = Incident.objects.filter(host=host)
    assert incident.kind == Incident.Kind.ALERT and incident.evidence["rule"] == "disk_low"
    assert (
        incident.message.startswith("Disk low on real-spark:") and str(tmp_path) in incident.message
    )
    sim = Host.objects.create(name="sim-spark", engine=Host.Engine.PROCESS, simulated=True,
                              port_min=30100, port_max=30199)  # fmt: skip
    settings.GUARD_DISK_MIN_FREE_GB = 10**9
    agent = HostAgent(sim.name)
    try:
        agent.watch_disk(0.0)
    finally:
        agent.close()
    assert not Incident.objects.filter(host=sim).exists()  # a simulated Spark has no disk
