"""The queue's start estimates cost the same whatever the queue's length (they run on
every queue page, job page and live push)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.benchmarks.models import J, Job
from apps.benchmarks.selectors import host_queue_entries, suite_plan

pytestmark = pytest.mark.django_db


def _job(suite, recipe, host, user, **fields) -> Job:
    return Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=user,
                              plan=suite_plan(suite), **fields)  # fmt: skip


def test_estimates_take_a_fixed_number_of_queries_and_add_up(
    sim_host, qwen, quick_suite, member, django_assert_max_num_queries
):
    now = timezone.now()
    for minutes in (10, 12):  # two finished jobs: the median takes 120 s
        _job(quick_suite, qwen, sim_host, member, state=J.DONE,
             started_at=now - timedelta(minutes=minutes, seconds=120),
             finished_at=now - timedelta(minutes=minutes))  # fmt: skip
    _job(quick_suite, qwen, sim_host, member, state=J.RUNNING, started_at=now)
    for _ in range(60):
        _job(quick_suite, qwen, sim_host, member)
    with django_assert_max_num_queries(6):
        entries = host_queue_entries(sim_host)
    assert [e.position for e in entries] == list(range(61))
    assert all(e.estimate_s == 120 for e in entries)
    # The 10th in line starts when the running job and the nine before it are done.
    wait = (entries[10].estimated_start - now).total_seconds()
    assert wait == pytest.approx(10 * 120, abs=2)
