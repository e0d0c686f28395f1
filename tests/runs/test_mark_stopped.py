"""`manage.py mark_stopped`: what `make run` does after Ctrl-C for its simulated host."""

from __future__ import annotations

import json
import uuid

import psutil
import pytest
from django.core.management import CommandError, call_command

from apps.benchmarks.models import Job, JobState, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.engines import engine_for
from apps.hosts.engines.base import LaunchSpec
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from sparkdomain.command import serve_argv
from tests.conftest import free_port

pytestmark = pytest.mark.django_db


def test_it_stops_the_hosts_servers_and_marks_its_active_runs_stopped(sim_host, qwen, capsys):
    port = free_port()
    loading = Run.objects.create(recipe=qwen, host=sim_host, port=port, image="x",
                                 state=RunState.LOADING)  # fmt: skip
    failed = Run.objects.create(recipe=qwen, host=sim_host, port=port + 2, image="x",
                                state=RunState.FAILED)  # fmt: skip
    other_host = Host.objects.create(name=f"other-{uuid.uuid4().hex[:6]}", simulated=True,
                                     engine=Host.Engine.PROCESS)  # fmt: skip
    queued = Run.objects.create(recipe=qwen, host=other_host, port=port + 3, image="x",
                                state=RunState.QUEUED)  # fmt: skip
    suite = Suite.objects.create(
        name="quick", scenarios=[{"name": "s", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=0, sweep_levels=[1], requests_per_level=1,
    )  # fmt: skip
    running = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, run=loading,
                                 state=JobState.PREPARING, plan=suite_plan(suite))  # fmt: skip
    waiting = Job.objects.create(suite=suite, recipe=qwen, host=sim_host,
                                 plan=suite_plan(suite))  # fmt: skip
    engine = engine_for(sim_host)
    engine.start(
        LaunchSpec(run_id=loading.pk, host_name=sim_host.name, image="x", port=port,
                   argv=serve_argv(qwen, host="127.0.0.1", port=port))
    )  # fmt: skip
    pidfile = sim_host_runs(sim_host) / str(loading.pk) / "pid.json"
    server = psutil.Process(json.loads(pidfile.read_text())["pid"])
    assert server.is_running()

    call_command("mark_stopped", "--host", sim_host.name, "--timeout", "5")

    psutil.wait_procs([server], timeout=10)
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    assert not pidfile.exists()
    assert engine.list_managed() == []
    loading.refresh_from_db()
    assert loading.state == RunState.STOPPED and "make run" in loading.step
    failed.refresh_from_db()
    queued.refresh_from_db()
    assert failed.state == RunState.FAILED  # finished runs are left as they are
    assert queued.state == RunState.QUEUED  # another host's run: not named, left alone
    out = capsys.readouterr().out
    assert f"{sim_host.name}: 1 server(s) stopped; runs marked stopped: {loading.pk}" in out
    # The job its worker was preparing is interrupted; a queued one waits for the next start.
    running.refresh_from_db()
    waiting.refresh_from_db()
    assert running.state == JobState.INTERRUPTED and waiting.state == JobState.QUEUED
    assert f"benchmark jobs interrupted: {running.pk}" in out
    # Without --host: every simulated host on the process engine.
    call_command("mark_stopped")
    queued.refresh_from_db()
    assert queued.state == RunState.STOPPED


def sim_host_runs(host):
    from django.conf import settings

    return settings.VAR_DIR / "runs"


def test_an_unknown_host_is_an_error():
    with pytest.raises(CommandError, match="no such host"):
        call_command("mark_stopped", "--host", "no-such-host")
