"""The line for a Spark (issue #42, point 5: "else queue the request with its position"): a
held request for a model that cannot load now, while what holds the Sparks will end by
itself, waits in line with its place; a Spark freed goes to the model asked for first;
requests that do not wait, and models blocked only by pinned or operators' runs, are
refused at once."""

from __future__ import annotations

import time

import pytest

from apps.gateway import catalog, store
from apps.gateway.models import OnDemand
from apps.runs.models import Run, RunState
from tests.runs.test_colocation import _recipe

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_line(fresh_gateway_keys):
    yield
    store._sync().delete(store.LOAD_QUEUE)


def _entry(recipe, host, priority=0) -> OnDemand:
    entry = OnDemand.objects.create(recipe=recipe, priority=priority)
    entry.hosts.add(host)
    return entry


def test_held_requests_wait_in_line_and_a_freed_spark_goes_to_the_first(sim_host, qwen):
    x, a, b = (_recipe(qwen, f"line-{n}", "0.5") for n in "xab")
    _entry(x, sim_host, priority=5)
    _entry(a, sim_host)
    _entry(b, sim_host)
    holder = Run.objects.create(recipe=x, host=sim_host, port=sim_host.port_min, image="x",
                                state=RunState.READY, on_demand=True)  # fmt: skip
    store._sync().set(store.used_key(holder.pk), int(time.time()))

    # A request that does not wait is told why, and is not in line.
    assert catalog.request_load(a.pk).state == "cannot_load"
    assert store.load_line() == []
    first = catalog.request_load(a.pk, wait=True)
    assert (first.state, first.position) == ("queued", 1)
    assert first.message.startswith("waiting for a Spark, first in line (")
    assert "priority 5 over 0" in first.message
    second = catalog.request_load(b.pk, wait=True)
    assert (second.state, second.position) == ("queued", 2)
    assert "number 2 in line" in second.message
    assert catalog.request_load(a.pk, wait=True).position == 1  # its place is kept

    # The Spark frees: B asks first, but A was in line before it and takes the room.
    Run.objects.filter(pk=holder.pk).update(state=RunState.STOPPED)
    behind = catalog.request_load(b.pk, wait=True)
    assert behind.state == "queued" and "line-a was asked for first" in behind.message
    assert not Run.objects.active().exists()
    loading = catalog.request_load(a.pk, wait=True)
    assert loading.state == "loading" and store.load_line() == [b.pk]
    assert Run.objects.active().get().recipe == a


def test_a_model_nobody_waits_for_leaves_the_line(sim_host, qwen):
    x, a, b = (_recipe(qwen, f"gone-{n}", "0.5") for n in "xab")
    _entry(x, sim_host, priority=5)
    _entry(a, sim_host)
    _entry(b, sim_host)
    Run.objects.create(recipe=x, host=sim_host, port=sim_host.port_min, image="x",
                       state=RunState.STARTING, on_demand=True)  # fmt: skip
    assert catalog.request_load(a.pk, wait=True).position == 1
    assert catalog.request_load(b.pk, wait=True).position == 2
    store._sync().delete(store._alive_key(a.pk))  # its held requests stopped asking
    assert store.load_line() == [b.pk]
    assert catalog.request_load(b.pk, wait=True).position == 1


def test_a_spark_held_by_a_pinned_or_an_operators_run_is_no_line_to_wait_in(sim_host, qwen):
    x, a = (_recipe(qwen, f"stuck-{n}", "0.5") for n in "xa")
    _entry(a, sim_host)
    manual = Run.objects.create(recipe=x, host=sim_host, port=sim_host.port_min, image="x",
                                state=RunState.READY)  # fmt: skip
    state = catalog.request_load(a.pk, wait=True)
    assert state.state == "cannot_load" and "started by an operator" in state.message
    Run.objects.filter(pk=manual.pk).update(on_demand=True, pinned=True)
    state = catalog.request_load(a.pk, wait=True)
    assert state.state == "cannot_load" and "pinned" in state.message
    assert store.load_line() == []
