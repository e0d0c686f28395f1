"""A real Celery worker process, consuming one Spark's queue from the real Redis."""

import uuid

import pytest
import redis
from celery.exceptions import TimeoutError as ResultTimeout

from apps.core.tasks import health
from sparkpanel.celery import host_queue

pytestmark = pytest.mark.services


def test_a_sparks_worker_runs_tasks_sent_to_its_queue(start_worker):
    node = start_worker(host_queue("spark-a"), "spark-a")
    echo = uuid.uuid4().hex
    result = health.apply_async(kwargs={"echo": echo}, queue=host_queue("spark-a"))
    answer = result.get(timeout=30)
    assert answer["echo"] == echo
    assert answer["worker"] == node
    assert answer["queue"] == "host.spark-a"
    assert answer["db"] is True


def test_a_sparks_worker_never_takes_another_sparks_work(start_worker, redis_url):
    start_worker(host_queue("spark-a"), "spark-a")
    other = host_queue(f"spark-b-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    try:
        result = health.apply_async(kwargs={"echo": "b"}, queue=other)
        with pytest.raises(ResultTimeout):
            result.get(timeout=2)
        assert result.state == "PENDING"
        # The message is still waiting in spark-b's queue for spark-b's worker.
        assert client.llen(other) == 1
    finally:
        client.delete(other)


def test_the_active_queues_are_visible_to_the_dashboard(start_worker):
    from apps.core.selectors import workers_state

    node = start_worker("default", "dflt")
    assert workers_state(timeout=2.0)[node] == ["default"]
