"""Hosts seen by their workers, and runs whose server vanished."""

import os
import signal

import docker
import pytest
from django.db import connection

from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.hosts.tasks import hosts_check_workers
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _kill(run) -> None:
    """SIGKILL the server from outside the panel (an OOM kill, say)."""
    engine, _, ref = run.handle.partition(":")
    if engine == "process":
        os.kill(int(ref.split(":")[0]), signal.SIGKILL)
    else:
        docker.DockerClient(base_url=run.host.docker_url).containers.get(ref).kill()


def test_a_server_killed_from_outside_fails_its_run_with_the_last_log_lines(
    engine_host, qwen, operator
):
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY
    assert runner.reconcile(engine_host.pk) == []  # alive: nothing to do
    _kill(run)
    wait_for(lambda: runner.reconcile(engine_host.pk) == [run.pk], 10, "reconcile sees the exit")
    run.refresh_from_db()
    assert run.state == RunState.FAILED
    code = -9 if engine_host.engine == "process" else 137
    assert f"exited with code {code} while ready" in run.failure_reason
    assert "Application startup complete." in run.failure_log
    assert engine_for(engine_host).list_managed() == []  # removed, its log kept on the run


@pytest.mark.services
def test_hosts_with_a_live_worker_show_online_and_others_do_not(start_worker, sim_host, tmp_path):
    other = Host.objects.create(name="spark-nobody", engine=Host.Engine.PROCESS, simulated=True)
    shared = {
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "SPARKPANEL_VAR_DIR": str(tmp_path),
    }
    node = start_worker(sim_host.queue, sim_host.name, **shared)
    seen = hosts_check_workers(timeout=2)
    assert seen == {sim_host.name: node}
    assert Host.objects.get(pk=sim_host.pk).online
    assert not Host.objects.get(pk=other.pk).online


@pytest.mark.services
def test_a_restarted_worker_reconciles_its_host_on_start(
    start_worker, sim_host, qwen, operator, tmp_path, settings
):
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    runner.start(run.pk)
    pid = int(Run.objects.get(pk=run.pk).handle.split(":")[1])
    os.kill(pid, signal.SIGKILL)
    shared = {
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "SPARKPANEL_VAR_DIR": str(settings.VAR_DIR),
    }
    start_worker(sim_host.queue, sim_host.name, **shared)
    wait_for(
        lambda: Run.objects.get(pk=run.pk).state == RunState.FAILED,
        30,
        "reconciled by the new worker",
    )


def test_a_restart_stops_the_run_and_starts_its_recipe_again_as_a_new_run(sim_host, qwen, operator):
    from apps.runs.services import run_restart

    run = run_start(recipe=qwen, host=sim_host, user=operator)
    runner.start(run.pk)
    run_restart(run=Run.objects.get(pk=run.pk), user=operator)
    assert Run.objects.get(pk=run.pk).state == RunState.STOPPING
    new_id = runner.restart(run.pk, operator.pk)  # what the host's worker runs
    assert Run.objects.get(pk=run.pk).state == RunState.STOPPED
    runner.start(new_id)
    new = Run.objects.get(pk=new_id)
    assert new.state == RunState.READY and new.restart_of_id == run.pk
    assert new.handle != Run.objects.get(pk=run.pk).handle
    runner.stop(new_id)


def test_reconcile_removes_servers_of_finished_runs(engine_host, qwen, operator):
    run = run_start(recipe=qwen, host=engine_host, user=operator)
    runner.start(run.pk)
    Run.objects.filter(pk=run.pk).update(state=RunState.FAILED)  # its server outlived it
    assert len(engine_for(engine_host).list_managed()) == 1
    runner.reconcile(engine_host.pk)
    assert engine_for(engine_host).list_managed() == []


def test_reconcile_records_servers_the_panel_did_not_start(sim_host, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT, free_port, stop_process

    port = free_port()
    stray = subprocess.Popen(
        [sys.executable, "-m", "sparksim", "serve", "someone/else", "--port", str(port),
         "--gpu-memory-utilization", "0.5", "--time-scale", "50"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        runner.reconcile(sim_host.pk)
        host = Host.objects.get(pk=sim_host.pk)
        assert host.inventory_at is not None
        assert str(stray.pid) in [item["id"] for item in host.unmanaged]
    finally:
        stop_process(stray)
