"""Fault: Redis (the Celery broker, the result store and the Channels layer) is stopped in
the middle of a benchmark job and started again ~2 s later from its append-only file.

- While it is down the panel degrades instead of failing: `/healthz` answers 503 with
  `redis: false`, the dashboard and the benchmarks page render (200), and the status
  panel says Redis is unreachable.
- The worker reconnects by itself (the same process, never restarted) and the jobs queued
  behind the running one survive the restart (AOF): they run to `done`, first come first
  served, one at a time, each exactly once.
- The job that was running when the connection dropped follows the Celery setting
  `worker_cancel_long_running_tasks_on_connection_loss` (docs/architecture.md): off (this
  panel's setting) it runs on through the outage and ends `done`; on, Celery would
  terminate it — the job would end `interrupted` with the level it measured before the
  drop kept, never run again (the next reconcile marks it).
- Live pages get pushes again: a subscriber of the `events` group (subscribed before the
  restart; the membership survives it) receives the worker's pushes for a job that ran
  entirely after the restart.

The test runs a private `redis-server` (free port, `--appendonly yes`, its own directory),
never the shared test Redis. The jobs are queued by `job_queue` in a `manage.py shell`
whose REDIS_URL is the private Redis — the web process's own path, publishing to the
broker the worker uses — rather than by re-pointing this process's Celery app (its
producer pool is bound to the shared Redis); the pages are fetched here with the test
client and REDIS_URL overridden.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from celery import Celery
from channels_redis.core import RedisChannelLayer
from django.test import Client
from django.urls import reverse
from kombu import Connection

from apps.benchmarks.models import J, Job, Result
from apps.runs import runner as run_runner
from apps.runs.models import Run
from tests.conftest import ROOT, child_env, free_port, require_service, stop_process, wait_for
from tests.faults.conftest import tiny_suite, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]

QUEUE_JOBS = """
from django.contrib.auth import get_user_model
from apps.benchmarks.models import Suite
from apps.benchmarks.services import job_queue
from apps.hosts.models import Host
from apps.recipes.models import Recipe
host, recipe = Host.objects.get(name={host!r}), Recipe.objects.get(pk={recipe})
users = get_user_model().objects.in_bulk({users!r})
for suite, user in {jobs!r}:
    job = job_queue(suite=Suite.objects.get(name=suite), recipe=recipe, host=host, user=users[user])
    print("queued", job.pk)
"""


class PrivateRedis:
    """A redis-server of the test's own, persisting to an append-only file in `dir`."""

    def __init__(self, directory: Path):
        self.dir, self.port = directory, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--appendonly", "yes", "--save", "", "--dir", str(self.dir)]  # fmt: skip
        log = (self.dir / "redis.log").open("a")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.up, 10, f"redis-server on {self.port}", self.proc)

    def up(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None:
            assert stop_process(self.proc, timeout=10) == 0  # SIGTERM: AOF flushed on exit
            self.proc = None


@pytest.fixture
def private_redis(tmp_path):
    require_service(shutil.which("redis-server") is not None, "redis-server")
    directory = tmp_path / "redis"
    directory.mkdir()
    server = PrivateRedis(directory)
    server.start()
    yield server
    server.stop()


@contextmanager
def _private_broker(url: str) -> Iterator[tuple[Celery, Connection]]:
    """A bare Celery client on a fresh connection to the private Redis: this process's
    app and kombu's pooled connections belong to the shared Redis (or went stale with the
    restart)."""
    app = Celery("fault-client", broker=url, set_as_current=False)
    try:
        with app.connection_for_write() as connection:
            yield app, connection
    finally:
        app.close()


def _ping(url: str, node: str) -> bool:
    with _private_broker(url) as (app, connection):
        return bool(app.control.ping(destination=[node], timeout=2, connection=connection))


def _layer(url: str) -> RedisChannelLayer:
    from django.conf import settings

    return RedisChannelLayer(
        hosts=[{"address": url}], prefix=settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    )


def _subscribe(url: str, channel: str) -> None:
    async def go():
        layer = _layer(url)
        await layer.group_add("events", channel)
        await layer.close_pools()

    asyncio.run(go())


def _drain(url: str, channel: str) -> list[str]:
    """Every fragment waiting for the subscriber (the layer keeps them 60 s)."""

    async def go():
        layer, html = _layer(url), []
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), 1)
            except TimeoutError:
                await layer.close_pools()
                return html
            html.append(message["html"])

    return asyncio.run(go())


def test_a_redis_restart_mid_job_degrades_the_panel_and_the_queue_survives(
    private_redis, sim_host, qwen, member, operator, settings, tmp_path
):
    sim_host.sim_time_scale = 200
    sim_host.sim_faults = "stall:1200@8"  # 6 s (wall) after the 8th token of every stream
    sim_host.save()
    tiny_suite("redis: long", ("first", 32, 2), ("stalls", 32, 16))
    tiny_suite("redis: short", ("only", 32, 2))  # 2 tokens: never reaches the stall
    env = child_env(**worker_env(settings, REDIS_URL=private_redis.url))
    node = f"redis-fault-{uuid.uuid4().hex[:6]}@localhost"
    log = tmp_path / "worker.log"
    argv = [sys.executable, "-m", "celery", "-A", "sparkpanel", "worker", "-Q", sim_host.queue,
            "-n", node, "-c", "1", "--prefetch-multiplier", "1", "-l", "INFO",
            "--without-mingle", "--without-gossip"]  # fmt: skip
    worker = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    subscriber = f"fault-{uuid.uuid4().hex}"
    try:
        jobs = [("redis: long", member.pk), ("redis: short", operator.pk), ("redis: short", member.pk)]  # fmt: skip
        code = QUEUE_JOBS.format(host=sim_host.name, recipe=qwen.pk, users=[member.pk, operator.pk], jobs=jobs)  # fmt: skip
        out = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        pks = [int(pk) for pk in re.findall(r"^queued (\d+)$", out.stdout, re.M)]
        first, second, third = (Job.objects.get(pk=pk) for pk in pks)
        _subscribe(private_redis.url, subscriber)

        def measuring() -> bool:
            job = Job.objects.get(pk=first.pk)
            return job.state == J.RUNNING and job.results.exists()

        wait_for(measuring, 60, f"the first job measuring (worker log: {log})", worker)
        assert _ping(private_redis.url, node)
        kept = list(Result.objects.filter(job=first).values_list("pk", flat=True))
        assert len(kept) == 1

        private_redis.stop()
        outage = time.time()
        settings.REDIS_URL = private_redis.url  # the pages check the private Redis
        client = Client(raise_request_exception=False)
        client.force_login(member)
        health = client.get("/healthz")
        assert health.status_code == 503
        assert json.loads(health.content) == {"ok": False, "database": True, "redis": False}
        assert client.get(reverse("dashboard")).status_code == 200
        assert client.get(reverse("benchmarks")).status_code == 200
        status = client.get(reverse("status")).content.decode()
        assert "Redis: unreachable" in status and "unknown while Redis is unreachable" in status
        time.sleep(max(0.0, outage + 2 - time.time()))
        private_redis.start()
        assert client.get("/healthz").status_code == 200

        def finished() -> bool:
            states = set(Job.objects.filter(pk__in=pks[1:]).values_list("state", flat=True))
            return states <= {J.DONE, J.FAILED, J.INTERRUPTED, J.CANCELLED}

        wait_for(finished, 60, f"the queued jobs finished (worker log: {log})", worker)
        # The same worker process reconnected by itself and answers on the restarted Redis.
        assert worker.poll() is None and _ping(private_redis.url, node)
        # The periodic reconcile, as beat sends it, on the host's own queue.
        with _private_broker(private_redis.url) as (app, connection):
            app.send_task(
                "runs.reconcile", args=[sim_host.pk], queue=sim_host.queue, connection=connection
            )
        wait_for(
            lambda: Job.objects.get(pk=first.pk).state not in (J.RUNNING, J.CANCELLING),
            30,
            f"the first job settled (worker log: {log})",
        )

        first, second, third = (Job.objects.get(pk=pk) for pk in pks)
        assert (second.state, third.state) == (J.DONE, J.DONE), (second.error, third.error)
        cancels = settings.CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS
        if cancels:  # Celery terminated it when the connection dropped; the rest ran after
            assert first.state == J.INTERRUPTED, first.error
            assert "stopped in the middle" in first.error
            assert list(first.results.values_list("pk", flat=True)) == kept
            assert second.started_at.timestamp() > outage
        else:  # it ran on through the outage, and the next one only after it
            assert first.state == J.DONE, first.error
            assert first.results.count() == 2
            assert second.started_at >= first.finished_at
        # FIFO, one at a time, each exactly once.
        assert first.started_at < second.started_at < third.started_at
        assert third.started_at >= second.finished_at
        for job in (second, third):
            assert list(job.results.values_list("scenario", flat=True)) == ["only"]
        received = re.findall(r"Task benchmarks\.run_job\[([0-9a-f-]+)\] received", log.read_text())
        assert len(received) == len(set(received)) == 3, received
        assert len({j.run_id for j in (first, second, third)}) == 1 and Run.objects.count() == 1

        # Live pages: the worker's pushes for the third job (all after the restart) arrived.
        pushed = _drain(private_redis.url, subscriber)
        done = [
            h for h in pushed if f'id="job-{third.pk}-progress"' in h and 'data-state="done"' in h
        ]
        assert done, [h[:120] for h in pushed]
    finally:
        worker.terminate()
        stop_process(worker, timeout=20)
        for run in Run.objects.active():
            run_runner.stop(run.pk)
