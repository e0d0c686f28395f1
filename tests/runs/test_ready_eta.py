"""A loading run's estimate is the time to ready: the rest of its phase and the phases to
come (compile, warm-up), as earlier ready starts of the same recipe on the same Spark took
them — never another Spark's — and says so honestly when there is none."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.catalog import state_of
from apps.gateway.models import OnDemand
from apps.hosts.clock import SCALE_FACT
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run

pytestmark = pytest.mark.django_db

PORTS = iter(range(20100, 20200))


def _host(name: str, **fields) -> Host:
    return Host.objects.create(name=name, engine=Host.Engine.PROCESS, **fields)


def _recorded(recipe, host, phases: list[tuple[str, float]], *, hours_ago=3, **fields) -> Run:
    """A run whose timings are what the state machine records: each phase's start and end,
    one after the other, `phases` the wall seconds of each; the last state is still open."""
    at = timezone.now() - timedelta(hours=hours_ago)
    timings = {}
    for state, seconds in phases:
        timings[state] = {
            "start": at.isoformat(),
            "end": (at + timedelta(seconds=seconds)).isoformat(),
        }
        at += timedelta(seconds=seconds)
    state = "stopped" if phases[-1][0] == "stopping" else phases[-1][0]
    if state == "stopped":
        timings["stopped"] = {"start": at.isoformat()}
    else:
        timings[state].pop("end")
    return Run.objects.create(recipe=recipe, host=host, port=next(PORTS), image="x",
                              state=state, timings=timings, **fields)  # fmt: skip


def _ready_start(recipe, host, *, compile_s: float, warm_s: float, hours_ago=3, **fields) -> Run:
    """An earlier start that was ready and was stopped since."""
    phases = [("queued", 2), ("starting", 10), ("loading", 100), ("compiling", compile_s),
              ("warming", warm_s), ("ready", 600), ("stopping", 3)]  # fmt: skip
    return _recorded(recipe, host, phases, hours_ago=hours_ago, **fields)


def _loading_now(recipe, host, *, spent_s: float, percent: float, **fields) -> Run:
    """A run loading its weights: `spent_s` in the phase so far, `percent` of the shards."""
    run = _recorded(recipe, host, [("queued", 1), ("starting", 5), ("loading", 0)], **fields)
    timings = {
        **run.timings,
        "loading": {"start": (timezone.now() - timedelta(seconds=spent_s)).isoformat()},
    }
    Run.objects.filter(pk=run.pk).update(timings=timings, percent=percent)
    run.refresh_from_db()
    return run


def _eta_words(client, run, *, pushed: bool = False) -> tuple[str, str]:
    """The estimate's words and tooltip on the run page, or (`pushed`) in the progress
    element the page's live updates fetch after every push of the run."""
    url = run.get_absolute_url()
    if pushed:
        url = reverse("live-element", args=["run-progress", run.pk])
    html = client.get(url).content.decode()
    found = re.search(r'data-testid="run-ready-eta" title="([^"]*)">([^<]*)<', html)
    assert found, "no estimate on the run page"
    return found.group(2), found.group(1)


def test_the_estimate_adds_compile_and_warm_up_from_ready_starts_on_the_same_spark_only(
    client_as, member, qwen
):
    spark, other = _host("spark-eta"), _host("spark-elsewhere")
    # Three ready starts here (one odd: a 15-minute first compile) and a slower Spark.
    _ready_start(qwen, spark, compile_s=900, warm_s=30, hours_ago=9)
    _ready_start(qwen, spark, compile_s=150, warm_s=30, hours_ago=6)
    _ready_start(qwen, spark, compile_s=150, warm_s=30, hours_ago=4)
    _ready_start(qwen, other, compile_s=2000, warm_s=400)
    # A failed start here never reached ready: it says nothing about the phases.
    _recorded(qwen, spark, [("queued", 1), ("starting", 5), ("loading", 9000), ("failed", 0)])

    run = _loading_now(qwen, spark, spent_s=60, percent=50)  # one more minute of weights
    # 60 s of weights left, then compile (median 150 s) and warm-up (30 s): 240 s to ready.
    assert run.remaining_seconds() == pytest.approx(240, abs=3)
    words, basis = _eta_words(client_as(member), run)
    assert words == "weights ~1 min, then compile and warm-up ~3 min: ready in ~4 min"
    assert basis == "The median of the last 3 ready starts of this recipe on this Spark."

    # The other Spark's own history sets its estimate (20 s of weights left there).
    there = _loading_now(qwen, other, spent_s=20, percent=50)
    assert there.remaining_seconds() == pytest.approx(20 + 2000 + 400, abs=3)

    # Once compiling, the rest of that phase is its usual length less what it spent.
    Run.objects.filter(pk=run.pk).update(state="compiling", timings={
        **run.timings, "loading": {**run.timings["loading"], "end": timezone.now().isoformat()},
        "compiling": {"start": (timezone.now() - timedelta(seconds=100)).isoformat()}})  # fmt: skip
    run.refresh_from_db()
    assert run.remaining_seconds() == pytest.approx(50 + 30, abs=3)
    words = _eta_words(client_as(member), run, pushed=True)[0]
    assert words == "compile ~50 s, then warm-up ~30 s: ready in ~1 min"

    # The gateway's load line waits for the same: weights, compile and warm-up (the other
    # Spark's start, once it is the one loading the model).
    Run.objects.filter(pk=run.pk).update(state="stopped")
    line = state_of(OnDemand.objects.create(recipe=qwen))
    assert line.state == "loading" and line.eta_s == pytest.approx(2420, abs=3)
    assert line.message.endswith("about 40 min")


def test_a_first_start_says_compile_and_warm_up_are_unknown_and_gives_no_eta(
    client_as, member, qwen
):
    spark = _host("spark-first")
    # Ready starts of this recipe elsewhere, and of another recipe here, do not count.
    _ready_start(qwen, _host("spark-seen"), compile_s=150, warm_s=30)
    another = Recipe.objects.get(pk=qwen.pk)
    another.pk = another.id = None
    another.name, another.slug = "Qwen another", "qwen-another"
    another.save()
    _ready_start(another, spark, compile_s=150, warm_s=30)
    run = _loading_now(qwen, spark, spent_s=60, percent=50)
    assert run.remaining_seconds() is None
    words, basis = _eta_words(client_as(member), run)
    assert words == "weights ~1 min, then compile and warm-up (unknown on the first start)"
    assert basis.startswith("No earlier start of this recipe on this Spark reached ready")
    assert "ready in" not in words


def test_a_simulated_spark_s_history_is_scaled_by_each_run_s_own_clock(qwen):
    sim = _host("spark-sim", simulated=True, sim_time_scale=10)
    # Recorded at ×10: 15 wall seconds of compiling were 150 s on the simulated Spark.
    _ready_start(qwen, sim, compile_s=15, warm_s=3, facts={SCALE_FACT: 10})
    # Started at ×50 now: those 180 simulated seconds take 3.6 wall seconds.
    run = _loading_now(qwen, sim, spent_s=4, percent=50, facts={SCALE_FACT: 50})
    assert run.remaining_seconds() == pytest.approx(4 + 3.6, abs=1)
