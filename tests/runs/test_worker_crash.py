"""A Spark's worker killed in the middle of starting a model (a real Celery worker process,
SIGKILLed with its pool): the server it started keeps running, and the next worker adopts
it and takes the run to ready — never a second server for one run."""

import pytest
from django.db import connection

from apps.hosts.engines import engine_for
from apps.hosts.engines.base import State
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from tests.conftest import kill_worker_tree, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def _state(run) -> str:
    return Run.objects.get(pk=run.pk).state


def test_a_worker_killed_mid_start_leaves_one_server_which_the_next_worker_adopts(
    engine_host, start_worker, qwen, operator, settings
):
    engine_host.sim_time_scale = 20  # long enough a load to kill the worker in the middle
    engine_host.save()
    shared = {
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "SPARKPANEL_VAR_DIR": str(settings.VAR_DIR),
    }
    node = start_worker(engine_host.queue, engine_host.name, **shared)
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    wait_for(lambda: _state(run) == RunState.LOADING, 60, "loading")
    handle = Run.objects.get(pk=run.pk).handle
    kill_worker_tree(start_worker.processes[node])

    engine = engine_for(engine_host)
    [server] = engine.list_managed()
    assert str(server.handle) == handle and server.status.state is State.RUNNING
    assert _state(run) == RunState.LOADING  # nobody follows it now

    start_worker(engine_host.queue, engine_host.name + "-2", **shared)
    wait_for(lambda: _state(run) in (RunState.READY, RunState.FAILED), 120, "adopted to ready")
    run = Run.objects.get(pk=run.pk)
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log[-2000:])
    assert run.handle == handle  # the same server, adopted
    assert [str(m.handle) for m in engine.list_managed()] == [handle]  # and only that one
    assert run.warm_ttft_s is not None
