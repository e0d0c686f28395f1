"""Fault: a flood of benchmark jobs — FAULT_JOBS of them (default 500, the issue's
figure), queued by 10 members on 2 simulated Sparks, each Spark with its own real worker.
Every job runs to `done`; on each host they run first come first served and one at a time
(each starts after the previous one finished); none runs twice (each has its one Result
row, and each task reached a worker once); each host loaded the recipe once (the first job
started it, every other job reused that ready run) and runs one model server.

The jobs are as cheap as a job gets (one 32/2 scenario, one request, no warm-up, no sweep):
what is measured is the queue, not the model. On the 2-core machine, idle, 500 jobs take
~71 s (a median 0.2 s of a worker's time per job: the harness's per-level set-up and the
live pushes). This test found the queue's estimate costing two queries per queued job on
every push and page (500 jobs took 110 s then), and later a full `gc.collect()` per level,
a fresh TLS context per job and a walk of the whole queue on every progress push of the
running job (0.54 s a job; 100 jobs took 50 s, now 22 s). `FAULT_JOBS=100` for a quicker
run.
"""

import itertools
import os
import random
import re
import time
from collections import Counter

import pytest

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.benchmarks.models import FINISHED_JOB_STATES, J, Job, Result
from apps.benchmarks.services import job_queue
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.runs import runner as run_runner
from apps.runs.models import Run, RunState
from tests.faults.conftest import sim_servers, tiny_suite, worker_env
from tests.isolation import PORT_SHIFT

JOBS = int(os.environ.get("FAULT_JOBS", "500"))
STALL_S = 60  # a job takes well under a second of a worker's time

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.services,
    pytest.mark.timeout(240 + JOBS),  # a backstop: the stall check fails a stuck flood first
]


@pytest.fixture
def two_hosts(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path  # the test reads what the workers write
    hosts = [
        Host.objects.create(
            name=f"flood-{i}",
            engine=Host.Engine.PROCESS,
            simulated=True,
            sim_time_scale=200,
            port_min=22000 + PORT_SHIFT + 100 * i,
            port_max=22099 + PORT_SHIFT + 100 * i,
        )
        for i in range(2)
    ]
    yield hosts
    for host in hosts:  # no server outlives its test
        engine = engine_for(host)
        for managed in engine.list_managed():
            engine.stop(managed.handle, timeout=5)


def test_many_jobs_from_many_members_on_two_hosts_run_fifo_once_each_without_overlap(
    start_worker, two_hosts, qwen, settings, tmp_path
):
    suite = tiny_suite("flood", ("tiny", 32, 2))
    users = [user_create(username=f"member-{i}", role=Role.MEMBER)[0] for i in range(10)]
    env = worker_env(settings)
    for host in two_hosts:
        start_worker(host.queue, host.name, **env)
    hosts = [two_hosts[i % 2] for i in range(JOBS)]
    random.Random(JOBS).shuffle(hosts)  # interleaved at random, half on each
    jobs = [
        job_queue(suite=suite, recipe=qwen, host=host, user=users[i % 10])
        for i, host in enumerate(hosts)
    ]

    def finished() -> int:
        return Job.objects.filter(state__in=FINISHED_JOB_STATES).count()

    # Held to progress, not to a deadline: the flood takes one minute on an idle 2-core
    # machine and several on a loaded one (a CI run beside other work took over five);
    # what must not happen is a queue that stops moving.
    done, last_move = 0, time.monotonic()
    while done < JOBS:
        time.sleep(0.5)
        now_done = finished()
        if now_done > done:
            done, last_move = now_done, time.monotonic()
        assert time.monotonic() - last_move < STALL_S, (
            f"no job finished for {STALL_S} s ({done} of {JOBS})"
        )
    assert Counter(Job.objects.values_list("state", flat=True)) == {J.DONE: JOBS}, list(
        Job.objects.exclude(state=J.DONE).values_list("pk", "state", "error")[:5]
    )
    assert Counter(Result.objects.values_list("job", flat=True)) == {j.pk: 1 for j in jobs}
    assert Counter(Job.objects.values_list("queued_by", flat=True)) == Counter(
        users[i % 10].pk for i in range(JOBS)
    )
    for host in two_hosts:
        mine = list(Job.objects.filter(host=host).order_by("queued_at", "pk"))
        assert len(mine) == hosts.count(host)
        # First come, first served; each starts after the one before it finished.
        for before, after in itertools.pairwise(mine):
            assert before.started_at < after.started_at, (before.pk, after.pk)
            assert before.finished_at <= after.started_at, (before.pk, after.pk)
        [run] = Run.objects.filter(host=host)
        assert run.state == RunState.READY and {j.run_id for j in mine} == {run.pk}
        assert [str(m.handle) for m in engine_for(host).list_managed()] == [run.handle]
        assert len(sim_servers(host)) == 1
    # Each job's task reached a worker once (a redelivery would show as a second "received").
    received = Counter()
    for path in tmp_path.glob("worker-*.log"):  # start_worker's logs, one per worker
        received.update(
            re.findall(r"Task benchmarks\.run_job\[([\w-]+)\] received", path.read_text())
        )
    assert len(received) == JOBS and set(received.values()) == {1}
    for run in Run.objects.all():
        run_runner.stop(run.pk)
