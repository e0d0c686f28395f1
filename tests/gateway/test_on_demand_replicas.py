"""Replicas under load (issue #42, point 5): a catalog model that allows several copies gets
another on a Spark with room while its copies are under load for a minute — requests
waiting, or a p95 TTFT over its SLO, in every telemetry bucket — and loses its newest extra
copy after five minutes with nothing waiting."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.audit.models import AuditEntry
from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.telemetry.models import HostSample
from tests.conftest import ports

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_gateway_keys")]


@pytest.fixture
def sparks(sim_host):
    other = Host.objects.create(name=f"{sim_host.name}-b", engine=Host.Engine.PROCESS,
                                simulated=True, sim_time_scale=50, **ports(20500, 20599))  # fmt: skip
    return sim_host, other


@pytest.fixture
def entry(qwen, sparks):
    entry = OnDemand.objects.create(recipe=qwen, max_replicas=2)
    entry.hosts.add(*sparks)
    return entry


def _run(recipe, host, **fields) -> Run:
    return Run.objects.create(recipe=recipe, host=host, port=host.port_min, image="x",
                              state=RunState.READY, on_demand=True, **fields)  # fmt: skip


def _telemetry(run: Run, seconds: int, **values) -> None:
    """The host agent's 10-second buckets for the run over the last `seconds`."""
    now = timezone.now()
    for ago in range(seconds, -1, -10):
        HostSample.objects.create(host=run.host, run=run, at=now - timedelta(seconds=ago),
                                  **values)  # fmt: skip


def test_a_minute_of_waiting_requests_adds_a_replica_on_another_spark(entry, sparks, qwen):
    first = _run(qwen, sparks[0])
    _telemetry(first, 30, waiting=3, running=8)
    assert catalog.scale_replicas() == []  # half a minute is not a minute
    HostSample.objects.all().delete()
    _telemetry(first, 70, waiting=3, running=8)
    done = catalog.scale_replicas()
    replica = Run.objects.exclude(pk=first.pk).get()
    assert replica.host == sparks[1] and replica.on_demand and replica.recipe == qwen
    assert done and "loading model" in done[0]
    audit = AuditEntry.objects.get(action="run.on_demand_load")
    assert audit.message == "replica: requests waiting for a minute"
    # While it starts, and once the entry's copies are all there, nothing more is added.
    assert catalog.scale_replicas() == []
    Run.objects.filter(pk=replica.pk).update(state=RunState.READY)
    assert catalog.scale_replicas() == []
    assert Run.objects.count() == 2


def test_a_slow_first_token_over_the_slo_adds_one_too(entry, sparks, qwen):
    first = _run(qwen, sparks[0])
    _telemetry(first, 70, waiting=0, running=2, ttft_p95=4.0)
    assert catalog.scale_replicas() == []  # no SLO set: waiting is the only signal
    OnDemand.objects.filter(pk=entry.pk).update(replica_ttft_slo_s=2.0)
    catalog.scale_replicas()
    assert Run.objects.filter(host=sparks[1], recipe=qwen).exists()
    message = AuditEntry.objects.get(action="run.on_demand_load").message
    assert message == "replica: time to first token (p95) over 2 s for a minute"


def test_an_extra_replica_stops_after_five_quiet_minutes_never_a_pinned_one(entry, sparks, qwen):
    first = _run(qwen, sparks[0])
    second = _run(qwen, sparks[1])
    _telemetry(first, 200, waiting=0, running=0)
    _telemetry(second, 200, waiting=0, running=0)
    assert catalog.scale_replicas() == []  # quiet, but not for five minutes yet
    HostSample.objects.all().delete()
    _telemetry(first, 310, waiting=0, running=0)
    _telemetry(second, 310, waiting=0, running=0)
    Run.objects.filter(pk=second.pk).update(pinned=True)
    catalog.scale_replicas()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == RunState.STOPPING and second.state == RunState.READY
    assert first.stop_reason.startswith("replica no longer needed")
    # The last copy is left to the idle timeout.
    Run.objects.filter(pk=first.pk).update(state=RunState.STOPPED)
    Run.objects.filter(pk=second.pk).update(pinned=False)
    assert catalog.scale_replicas() == []


def test_no_room_for_a_replica_adds_nothing_and_stops_nothing(entry, sparks, qwen, too_long):
    first = _run(qwen, sparks[0])
    manual = Run.objects.create(recipe=too_long, host=sparks[1], port=sparks[1].port_min,
                                image="x", state=RunState.READY)  # fmt: skip
    _telemetry(first, 70, waiting=5)
    assert catalog.scale_replicas() == []
    manual.refresh_from_db()
    assert manual.state == RunState.READY and Run.objects.count() == 2
