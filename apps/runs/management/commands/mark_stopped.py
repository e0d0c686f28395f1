"""`manage.py mark_stopped --host local-sim`: stop the model servers a host's process engine
started (found by their pid files), mark the host's active runs stopped and its benchmark
jobs in progress interrupted (their results stay; queued jobs wait for the next start).

`make run` calls it after Ctrl-C, once its worker is gone: the simulated host's sparksim
servers live in sessions of their own (so that a worker restart does not kill a loaded
model), so nothing else would stop them, and their runs would still read "ready".
Without --host it does this for every simulated host on the process engine.
"""

from __future__ import annotations

import contextlib

from django.core.management.base import BaseCommand, CommandError

from apps.core.hooks import gathered
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.runs.models import InvalidTransition, Run, RunState
from apps.runs.signals import host_worker_free

STOP_TIMEOUT_S = 3.0
STEP = "Stopped: the panel's `make run` was stopped (Ctrl-C)"


def mark_stopped(host, *, timeout: float = STOP_TIMEOUT_S) -> tuple[int, list[int], list[int]]:
    """Stop the host's managed servers, mark its active runs stopped and its jobs in
    progress interrupted. Returns (servers stopped, run ids marked, job ids interrupted)."""
    engine = engine_for(host)
    servers = 0
    for item in engine.list_managed():
        with contextlib.suppress(Exception):  # one stubborn server must not keep the others
            engine.stop(item.handle, timeout=timeout)
            engine.remove(item.handle)
            servers += 1
    marked = []
    for run in Run.objects.active().on(host):
        with contextlib.suppress(InvalidTransition):
            if run.state != RunState.STOPPING:
                run.transition(RunState.STOPPING, step=STEP)
            run.transition(RunState.STOPPED, step=STEP)
            marked.append(run.pk)
    # Their worker is gone too: a job it was running would say "running" forever (the
    # benchmarks app interrupts them and answers their ids).
    return servers, marked, gathered(host_worker_free, sender=Host, host=host)


class Command(BaseCommand):
    help = "Stop a host's local model servers (process engine) and mark its active runs stopped."

    def add_arguments(self, parser):
        parser.add_argument("--host", action="append", default=[], help="a host name (repeatable)")
        parser.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S,
                            help="seconds a server gets after SIGTERM before SIGKILL")  # fmt: skip

    def handle(self, *args, **options):
        if options["host"]:
            hosts = list(Host.objects.filter(name__in=options["host"]))
            missing = set(options["host"]) - {h.name for h in hosts}
            if missing:
                raise CommandError(f"no such host: {', '.join(sorted(missing))}")
        else:
            hosts = list(Host.objects.filter(simulated=True, engine=Host.Engine.PROCESS))
        for host in hosts:
            if host.engine != Host.Engine.PROCESS:
                self.stdout.write(f"{host.name}: not on the process engine, left alone")
                continue
            servers, marked, jobs = mark_stopped(host, timeout=options["timeout"])
            runs = ", ".join(str(pk) for pk in marked) or "none"
            interrupted = ", ".join(str(pk) for pk in jobs) or "none"
            self.stdout.write(
                f"{host.name}: {servers} server(s) stopped; runs marked stopped: {runs}; "
                f"benchmark jobs interrupted: {interrupted}"
            )
