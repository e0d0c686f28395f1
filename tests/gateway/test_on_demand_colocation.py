"""On-demand models side by side (issue #42, points 3–5): a load goes beside what a Spark
runs when the pools fit together, else replaces the least important idle model whose stop
makes room — and says which."""

from __future__ import annotations

import time

import pytest

from apps.gateway import catalog, store
from apps.gateway.models import OnDemand
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from tests.runs.test_colocation import _meminfo, _recipe, colocating

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_gateway_keys")]


@pytest.fixture
def spark(sim_host, tmp_path):
    return colocating(sim_host, tmp_path, 2)


def _entry(recipe: Recipe, spark, priority: int) -> OnDemand:
    entry = OnDemand.objects.create(recipe=recipe, priority=priority, idle_timeout_s=600)
    entry.hosts.add(spark)
    return entry


def _ready_idle(run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(state=RunState.READY)
    store._sync().set(store.used_key(run.pk), int(time.time()) - 3600)
    run.refresh_from_db()
    return run


def test_two_models_share_a_spark_and_a_third_replaces_the_least_important(spark, qwen):
    a, b, c = (_recipe(qwen, f"od-{x}", u) for x, u in (("a", "0.30"), ("b", "0.30"),
                                                       ("c", "0.45")))  # fmt: skip
    entries = [_entry(a, spark, 0), _entry(b, spark, 1), _entry(c, spark, 1)]

    assert catalog.request_load(a.pk).state == "loading"
    first = _ready_idle(Run.objects.get(recipe=a))
    _meminfo(spark.meminfo, 80)  # its pool, as the host now measures it

    state = catalog.state_of(entries[1])
    assert (state.state, state.message) == ("can_load", f"{b.public_name} can load on "
                                            f"{spark.name} (beside Od A)")  # fmt: skip
    assert catalog.request_load(b.pk).state == "loading"
    second = Run.objects.get(recipe=b)
    assert (first.slot, second.slot, second.on_demand) == (0, 1, True)
    # While B starts, C neither joins nor replaces anything on that Spark.
    assert catalog.state_of(entries[2]).state == "cannot_load"
    _ready_idle(second)
    _meminfo(spark.meminfo, 40)

    # C (0.45) beside both: 1.05 of the Spark. Stopping A (priority 0, below B's 1) leaves
    # 0.75 and frees its 38.6 GB: A is the one replaced.
    placement = catalog.place(entries[2])
    assert (placement.host, placement.stops) == (spark, (first,))
    state = catalog.request_load(c.pk)
    assert state.state == "loading" and "stopping idle “Od A” first" in state.message
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == RunState.STOPPING and second.state == RunState.READY
    # Asked again while A stops (C's start waits for it on the host's queue): the same
    # load, under way — B, now the only other stoppable run, is not stopped too.
    again = catalog.request_load(c.pk, wait=True)
    assert again.state == "loading" and "stopping idle “Od A” first" in again.message
    second.refresh_from_db()
    assert second.state == RunState.READY and not Run.objects.filter(recipe=c).exists()


def test_a_stop_that_would_not_make_room_is_not_made(spark, qwen):
    a, b, c = (_recipe(qwen, f"od-{x}", u) for x, u in (("a", "0.30"), ("b", "0.45"),
                                                       ("c", "0.65")))  # fmt: skip
    _entry(a, spark, 0)
    _entry(b, spark, 0)
    entry_c = _entry(c, spark, 5)
    run_a = _ready_idle(Run.objects.create(recipe=a, host=spark, port=20001, image="x",
                                           on_demand=True, slot=0, pinned=True))  # fmt: skip
    run_b = _ready_idle(Run.objects.create(recipe=b, host=spark, port=20002, image="x",
                                           on_demand=True, slot=1))  # fmt: skip
    _meminfo(spark.meminfo, 40)
    # A is pinned; stopping B would leave A's 0.30 + C's 0.65 = 0.95 of the Spark: no stop
    # makes room, so none is made, and the answer says why.
    placement = catalog.place(entry_c)
    assert placement.host is None
    assert f"{spark.name} runs “Od A” (pinned)" in placement.why
    assert "stopping “Od B”" in placement.why and "would not make room" in placement.why
    assert catalog.request_load(c.pk).state == "cannot_load"
    run_a.refresh_from_db()
    run_b.refresh_from_db()
    assert run_a.state == run_b.state == RunState.READY
    # Unpinned, neither stop alone makes room (0.45 or 0.30 beside 0.65): both go.
    Run.objects.filter(pk=run_a.pk).update(pinned=False)
    assert set(catalog.place(entry_c).stops) == {run_a, run_b}
    state = catalog.request_load(c.pk)
    assert state.state == "loading" and "stopping idle “Od" in state.message
    assert set(Run.objects.filter(state=RunState.STOPPING)) == {run_a, run_b}
