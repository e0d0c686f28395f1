"""Two simulated Sparks, each served by its own real Celery worker on its own queue, run
two recipes at once: the whole path from the service to the worker to sparksim and back."""

import pytest
from django.db import connection

from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from apps.runs.services import run_start, run_stop
from tests.conftest import wait_for
from tests.isolation import PORT_SHIFT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _state(run: Run) -> str:
    return Run.objects.get(pk=run.pk).state


def test_two_hosts_with_their_own_workers_run_two_recipes_at_once(
    start_worker, qwen, operator, tmp_path, settings
):
    settings.VAR_DIR = tmp_path  # the test reads what the workers write
    shared = {
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "SPARKPANEL_VAR_DIR": str(tmp_path),
    }
    hosts = [
        Host.objects.create(
            name=name,
            engine=Host.Engine.PROCESS,
            simulated=True,
            sim_time_scale=40,
            port_min=21000 + PORT_SHIFT + 100 * i,
            port_max=21099 + PORT_SHIFT + 100 * i,
        )
        for i, name in enumerate(["spark-a", "spark-b"])
    ]
    for host in hosts:
        start_worker(host.queue, host.name, **shared)
    runs = [run_start(recipe=qwen, host=host, user=operator) for host in hosts]
    for run in runs:
        wait_for(
            lambda run=run: _state(run) in (RunState.READY, RunState.FAILED), 90, f"run {run.pk}"
        )
    runs = [Run.objects.get(pk=run.pk) for run in runs]
    assert [r.state for r in runs] == [RunState.READY, RunState.READY], [
        r.failure_reason for r in runs
    ]
    # They loaded at the same time, each on its own host.
    a, b = (r.timings["loading"] for r in runs)
    assert a["start"] < b["end"] and b["start"] < a["end"]
    assert runs[0].handle != runs[1].handle and runs[0].port != runs[1].port

    for run in runs:
        run_stop(run=run)
    for run in runs:
        wait_for(lambda run=run: _state(run) == RunState.STOPPED, 30, f"run {run.pk} stopped")
