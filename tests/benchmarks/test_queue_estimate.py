"""The queue's start estimates cost the same whatever the queue's length (they run on
every queue page, job page and live push)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.benchmarks.models import J, Job
from apps.benchmarks.selectors import host_queue_entries, queue_entry, suite_plan

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


def test_a_running_jobs_entry_is_the_queues_head_without_reading_the_queue(
    sim_host, qwen, quick_suite, member, django_assert_max_num_queries
):
    """The worker's progress pushes ask for the running job's entry several times a job:
    the same entry the queue's walk gives it, in a fixed number of queries however long
    the queue behind it is."""
    now = timezone.now()
    _job(quick_suite, qwen, sim_host, member, state=J.DONE,
         started_at=now - timedelta(minutes=5), finished_at=now - timedelta(minutes=3))  # fmt: skip
    running = _job(quick_suite, qwen, sim_host, member, state=J.RUNNING, started_at=now)
    queued = [_job(quick_suite, qwen, sim_host, member) for _ in range(40)]
    with django_assert_max_num_queries(2):
        entry = queue_entry(running)
    assert entry == host_queue_entries(sim_host)[0]
    assert (entry.position, entry.estimated_start, entry.estimate_s) == (0, now, 120)
    assert queue_entry(queued[4]) == host_queue_entries(sim_host)[5]
