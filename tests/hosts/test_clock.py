"""One clock (apps/hosts/clock.py): every figure of a simulated host is in the host's time,
converted in one place, labelled, and fixed per run by the speed its server started with."""

from datetime import timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from apps.chat.consumers import _StreamState
from apps.hosts.clock import (
    REAL,
    SCALE_FACT,
    HostClock,
    context_clock,
    host_clock,
    record_run_clock,
    run_clock,
)
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from tests.isolation import PORT_SHIFT
from vllm_adapter.metrics import Deriver, parse


def test_conversions_go_both_ways_and_rates_divide():
    clock = HostClock(10, simulated=True)
    assert clock.host_seconds(2.0) == 20.0
    assert clock.wall_seconds(20.0) == 2.0
    assert clock.host_rate(480.0) == 48.0
    assert clock.host_seconds(None) is None and clock.host_rate(None) is None
    assert clock.label == "simulated ×10"
    assert REAL.host_seconds(3.0) == 3.0 and REAL.host_rate(5.0) == 5.0 and REAL.label == ""
    assert HostClock(2.5, simulated=True).as_dict() == {
        "scale": 2.5,
        "simulated": True,
        "label": "simulated ×2.5",
    }
    for bad in (0, -1):
        with pytest.raises(ValueError):
            HostClock(bad)


def test_a_real_host_keeps_the_wall_clock_whatever_its_speed_field_says():
    assert host_clock(Host(name="spark", simulated=False, sim_time_scale=20)) is REAL
    assert host_clock(Host(name="sim", simulated=True, sim_time_scale=20)) == HostClock(
        20, simulated=True
    )
    assert host_clock(None) is REAL


@pytest.fixture
def sim10(db):
    return Host.objects.create(name="clock-sim", engine=Host.Engine.PROCESS, simulated=True,
                               sim_time_scale=10, port_min=20000 + PORT_SHIFT, port_max=20099 + PORT_SHIFT)  # fmt: skip


def _run(host, qwen, **fields) -> Run:
    return Run.objects.create(recipe=qwen, host=host, image="x", **{"port": 20001, **fields})


def test_run_clock_uses_the_speed_recorded_at_start_not_the_hosts_speed_now(sim10, qwen):
    run = _run(sim10, qwen, facts={"vllm_version": "0.33.0"})
    assert run_clock(run).scale == 10  # nothing recorded yet: the host's speed
    record_run_clock(run)
    assert Run.objects.get(pk=run.pk).facts == {"vllm_version": "0.33.0", SCALE_FACT: 10.0}
    Host.objects.filter(pk=sim10.pk).update(sim_time_scale=40)
    run = Run.objects.select_related("host").get(pk=run.pk)
    assert run.host.sim_time_scale == 40
    assert run_clock(run) == HostClock(10, simulated=True)  # history keeps its clock
    record_run_clock(run)  # a redelivered start does not overwrite it
    assert run.facts[SCALE_FACT] == 10.0
    assert Run.objects.get(pk=run.pk).facts[SCALE_FACT] == 10.0


def test_a_run_on_a_real_host_records_the_wall_clock(db, qwen):
    spark = Host.objects.create(name="spark-1", engine=Host.Engine.DOCKER, sim_time_scale=20,
                                port_min=20000 + PORT_SHIFT, port_max=20099 + PORT_SHIFT)  # fmt: skip
    run = _run(spark, qwen)
    assert record_run_clock(run) is REAL
    assert run.facts == {SCALE_FACT: None}
    Host.objects.filter(pk=spark.pk).update(simulated=True)  # later made a simulator
    assert run_clock(Run.objects.get(pk=run.pk)) is REAL


def test_phase_timings_are_host_time_for_the_phases_the_server_paces(sim10, qwen):
    t0 = timezone.now()

    def span(start: float, end: float) -> dict:
        return {"start": (t0 + timedelta(seconds=start)).isoformat(),
                "end": (t0 + timedelta(seconds=end)).isoformat()}  # fmt: skip

    timings = {
        RunState.QUEUED: span(0, 1),
        RunState.PULLING: span(1, 4),  # an image pull takes as long as it takes
        RunState.STARTING: span(4, 5),
        RunState.LOADING: span(5, 25),  # 20 wall s at 10× = 200 s on a real Spark
        RunState.COMPILING: span(25, 28),
        RunState.WARMING: {"start": span(28, 29)["start"]},  # not finished
    }
    run = _run(sim10, qwen, timings=timings, facts={SCALE_FACT: 10.0})
    seconds = run.phase_seconds()
    assert seconds == pytest.approx(
        {"queued": 1, "pulling": 3, "starting": 10, "loading": 200, "compiling": 30}
    )
    rows = {phase: simulated for phase, _s, simulated in run.phase_rows()}
    assert rows == {"queued": False, "pulling": False, "starting": True, "loading": True,
                    "compiling": True}  # fmt: skip
    run.facts = {SCALE_FACT: None}  # the same timings on a real Spark: as measured
    assert run.phase_seconds()["loading"] == pytest.approx(20)
    assert not any(simulated for *_x, simulated in run.phase_rows())


def test_sim_label_names_the_clock_of_a_run_a_job_and_a_message(sim10, qwen):
    run = _run(sim10, qwen, facts={SCALE_FACT: 10.0})
    html = Template("{% load hosts_tags %}{{ 48.04|floatformat:1 }} tok/s{{ obj|sim_label }}")
    shown = html.render(Context({"obj": run}))
    assert shown.startswith("48.0 tok/s <span") and ">simulated ×10</span>" in shown
    assert html.render(Context({"obj": Run(facts={SCALE_FACT: None})})) == "48.0 tok/s"
    assert html.render(Context({"obj": None})) == "48.0 tok/s"
    assert context_clock({"simulated": True, "time_scale": 40}).label == "simulated ×40"
    assert context_clock({"simulated": False, "time_scale": 1.0}) is REAL

    from apps.chat.models import Conversation, Message

    conv = Conversation.objects.create(user=_user(), run=run)
    message = Message.objects.create(conversation=conv, role="assistant", run=run, tok_s=48)
    assert message.as_dict()["clock_label"] == "simulated ×10"
    assert context_clock(message) == HostClock(10, simulated=True)


def _user():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("clock-user", password="x")


def test_the_chat_times_an_answer_in_the_hosts_clock():
    state = _StreamState()
    state.started = 100.0
    state.first_token, state.last_token = 100.05, 101.05  # wall: 50 ms, then 1 s
    state.usage = {"prompt_tokens": 10, "completion_tokens": 481}
    wall = state.stats()
    assert wall["ttft_s"] == pytest.approx(0.05) and wall["tok_s"] == pytest.approx(480)
    host = state.stats(10)
    assert host["ttft_s"] == pytest.approx(0.5) and host["tok_s"] == pytest.approx(48)


METRICS = """# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{model_name="m"}} {gen}
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{{model_name="m"}} {prompt}
"""


@pytest.mark.parametrize(("scale", "expected"), [(1.0, 480.0), (10.0, 48.0)])
def test_the_agents_token_rates_are_per_host_second(scale, expected):
    deriver = Deriver(time_scale=scale)
    deriver.feed(0.0, parse(METRICS.format(gen=0, prompt=0)))
    deriver.feed(1.0, parse(METRICS.format(gen=480, prompt=960)))
    sample = deriver.sample()
    assert sample["generation_tps"] == pytest.approx(expected)
    assert sample["prompt_tps"] == pytest.approx(2 * expected)
    with pytest.raises(ValueError):
        Deriver(time_scale=0)


def test_answers_saved_before_the_one_clock_are_converted_to_host_time(sim10, qwen):
    """The data migration: an answer timed on the wall clock on a 10× host (483 tok/s, the
    figure the issue saw) reads 48.3 tok/s afterwards; a real host's answers stay."""
    import importlib

    from django.apps import apps

    from apps.chat.models import Conversation, Message

    migration = importlib.import_module("apps.chat.migrations.0002_answers_in_host_time")
    spark = Host.objects.create(name="spark-2", engine=Host.Engine.DOCKER, port_min=20000,
                                port_max=20099)  # fmt: skip
    sim_run, real_run = _run(sim10, qwen), _run(spark, qwen, port=20002)
    conv = Conversation.objects.create(user=_user(), run=sim_run)
    old = Message.objects.create(conversation=conv, role="assistant", run=sim_run,
                                 ttft_s=0.05, tok_s=483.0)  # fmt: skip
    real = Message.objects.create(conversation=conv, role="assistant", run=real_run,
                                  ttft_s=0.4, tok_s=48.0)  # fmt: skip
    migration.to_host_time(apps, None)
    old.refresh_from_db()
    real.refresh_from_db()
    assert old.ttft_s == pytest.approx(0.5) and old.tok_s == pytest.approx(48.3)
    assert real.ttft_s == pytest.approx(0.4) and real.tok_s == pytest.approx(48.0)


def test_the_host_page_labels_its_telemetry_with_the_hosts_clock(sim10, client_as, member):
    from django.urls import reverse

    html = client_as(member).get(reverse("host-detail", args=[sim10.name])).content.decode()
    telemetry = html[html.index('id="host-telemetry"') :][:600]
    assert "simulated ×10" in telemetry
