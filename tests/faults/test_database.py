"""Fault 7: the database is briefly locked or unavailable. SQLite (the default install):
writers wait for the lock (busy timeout) and then succeed; past the timeout the request
fails visibly (503 page / JSON, Retry-After) and nothing is half-written.

PostgreSQL restarts are not exercised here (no PostgreSQL server in the test setup); the
same handler turns its OperationalError into the same 503 (docs/reliability.md).
"""

import sqlite3
import threading
import time
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client

from apps.api.models import IdempotencyKey
from apps.api.tokens import token_create
from apps.benchmarks.models import Job, Suite
from apps.core.models import Notice

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def write_lock(seconds: float | None = None):
    """Another process' writer: holds SQLite's write lock (for `seconds`, or until exit)."""
    other = sqlite3.connect(
        connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False
    )
    other.execute("BEGIN IMMEDIATE")
    guard = threading.Lock()
    released = []

    def release():
        with guard:
            if not released:
                released.append(True)
                other.execute("ROLLBACK")

    timer = threading.Timer(seconds, release) if seconds else None
    if timer:
        timer.start()
    try:
        yield
    finally:
        if timer:
            timer.join()
        release()
        other.close()


@pytest.fixture
def short_busy_timeout():
    options = connection.settings_dict["OPTIONS"]
    saved = options.get("timeout")
    connection.close()
    options["timeout"] = 0.5
    yield
    connection.close()
    options["timeout"] = saved


def test_a_writer_waits_for_a_brief_lock_and_then_saves(operator):
    client = Client()
    client.force_login(operator)
    started = time.monotonic()
    with write_lock(seconds=1.5):
        response = client.post("/notices/", {"message": "Swapping spark-1", "level": "info"})
        waited = time.monotonic() - started
    assert response.status_code in (200, 302)
    assert Notice.objects.filter(message="Swapping spark-1").count() == 1
    assert waited >= 1.3  # it queued on the lock instead of failing


def test_a_lock_past_the_timeout_is_a_503_and_nothing_half_written(
    operator, sim_host, qwen, short_busy_timeout
):
    Suite.objects.create(name="db fault", scenarios=[{"name": "s", "prompt_tokens": 100,
                         "output_tokens": 10}], sweep_levels=[1])  # fmt: skip
    client = Client(raise_request_exception=False)
    client.force_login(operator)
    _, token = token_create(user=operator, name="ci")
    body = {"recipe": qwen.slug, "host": sim_host.name, "suite": "db fault"}
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "nightly-1"}
    with write_lock():
        page = client.post("/notices/", {"message": "lost?", "level": "info"})
        api = client.post("/api/v1/jobs", body, content_type="application/json", headers=headers)
    assert page.status_code == 503 and page["Retry-After"] == "5"
    assert b"nothing was saved" in page.content
    assert api.status_code == 503
    assert api.json()["error"]["code"] == "database_unavailable"
    assert not Notice.objects.filter(message="lost?").exists()
    # The idempotency key and the job are one transaction: neither exists...
    assert not IdempotencyKey.objects.exists() and not Job.objects.exists()
    # ...so the script's retry with the same key queues the job (once).
    retry = client.post("/api/v1/jobs", body, content_type="application/json", headers=headers)
    assert retry.status_code == 201 and Job.objects.count() == 1
