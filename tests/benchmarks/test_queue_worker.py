"""Two members queue jobs on one Spark: its real worker runs them strictly one after the
other, first come first served."""

import itertools

import pytest
from django.db import connection

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.benchmarks.models import J, Job
from apps.benchmarks.services import job_queue
from apps.runs import runner as run_runner
from tests.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


def test_two_members_jobs_on_one_host_run_one_after_the_other_in_order(
    start_worker, sim_host, qwen, quick_suite, member, settings
):
    quick_suite.sweep_levels, quick_suite.sweep_output_tokens = [1, 2], 64
    quick_suite.save()
    other, *_ = user_create(username="nia", role=Role.MEMBER)
    start_worker(sim_host.queue, sim_host.name,
                 DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
                 SPARKPANEL_VAR_DIR=str(settings.VAR_DIR))  # fmt: skip
    first = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    second = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=other)
    third = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    jobs = [first, second, third]

    def all_done() -> bool:
        return all(
            Job.objects.get(pk=j.pk).state not in (J.QUEUED, J.PREPARING, J.RUNNING) for j in jobs
        )

    wait_for(all_done, 120, "three jobs finished")
    jobs = [Job.objects.get(pk=j.pk) for j in jobs]
    assert [j.state for j in jobs] == [J.DONE] * 3, [j.error for j in jobs]
    # FIFO and no overlap: each starts after the previous one finished.
    for before, after in itertools.pairwise(jobs):
        assert before.finished_at <= after.started_at
    assert len({j.run_id for j in jobs}) == 1  # one model load, reused
    assert all(j.results.count() == 3 for j in jobs)  # 1 scenario + 2 sweep levels each
    run_runner.stop(jobs[0].run_id)
