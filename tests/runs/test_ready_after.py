"""A ready run says how long its start took ("ready after X"), a number that stays put,
instead of an "elapsed" counter that keeps counting while the model serves."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.hosts.models import Host
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db

PHASES = [("queued", 5), ("starting", 10), ("loading", 70), ("warming", 15)]  # 100 s


def _timings(end_state: str) -> dict:
    at = timezone.now() - timedelta(hours=2)
    timings = {}
    for state, seconds in PHASES:
        timings[state] = {
            "start": at.isoformat(),
            "end": (at + timedelta(seconds=seconds)).isoformat(),
        }
        at += timedelta(seconds=seconds)
    timings[end_state] = {"start": at.isoformat()}
    return timings


@pytest.fixture
def real_host(db):  # a Spark's own clock: the phase timings are wall seconds
    return Host.objects.create(name="spark-clock", engine=Host.Engine.PROCESS, simulated=False)


def _progress(client, run) -> str:
    html = client.get(run.get_absolute_url()).content.decode()
    return re.search(rf'<div id="run-{run.pk}-progress".*?</div>', html, re.S).group()


def test_a_ready_run_says_ready_after_the_start_and_not_elapsed(client_as, member, real_host, qwen):
    run = Run.objects.create(recipe=qwen, host=real_host, port=20001, image="x",
                             state=RunState.READY, timings=_timings("ready"))  # fmt: skip
    assert run.ready_after_seconds() == pytest.approx(100)
    progress = _progress(client_as(member), run)
    assert "ready after 1:40" in progress and "elapsed" not in progress
    # Stopping a run that was ready still says how long its start took.
    Run.objects.filter(pk=run.pk).update(state=RunState.STOPPING, timings={
        **run.timings, "ready": {**run.timings["ready"], "end": timezone.now().isoformat()},
        "stopping": {"start": timezone.now().isoformat()}})  # fmt: skip
    run.refresh_from_db()
    assert "ready after 1:40" in _progress(client_as(member), run)


def test_a_loading_run_still_counts_elapsed(client_as, member, real_host, qwen):
    run = Run.objects.create(recipe=qwen, host=real_host, port=20001, image="x",
                             state=RunState.LOADING, timings=_timings("loading"))  # fmt: skip
    assert run.ready_after_seconds() is None
    progress = _progress(client_as(member), run)
    assert "elapsed" in progress and "ready after" not in progress
