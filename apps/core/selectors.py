"""Read-only views of the system's health, for the dashboard and /healthz."""

from __future__ import annotations

from dataclasses import dataclass, field

from celery import current_app  # the project's app (sparkpanel/celery.py)
from django.conf import settings
from django.db import DatabaseError, connection

from apps.core import redisconn


@dataclass
class ServiceState:
    ok: bool
    detail: str


@dataclass
class SystemStatus:
    database: ServiceState
    redis: ServiceState
    workers: dict[str, list[str]] = field(default_factory=dict)  # worker -> queues
    workers_checked: bool = False

    @property
    def ok(self) -> bool:
        return self.database.ok and self.redis.ok


def database_state() -> ServiceState:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return ServiceState(True, connection.vendor)
    except DatabaseError as exc:
        return ServiceState(False, f"{type(exc).__name__}: {exc}")


def redis_state(timeout: float = 0.5) -> ServiceState:
    problem = redisconn.ping(settings.REDIS_URL, timeout=timeout)
    if problem is None:
        return ServiceState(True, "reachable")
    return ServiceState(False, f"unreachable ({problem})")


def workers_state(timeout: float = 1.0) -> dict[str, list[str]]:
    """Workers that answered within `timeout`, with the queues each consumes."""
    replies = current_app.control.inspect(timeout=timeout).active_queues() or {}
    return {worker: sorted(q["name"] for q in queues) for worker, queues in replies.items()}


def system_status(*, check_workers: bool = False) -> SystemStatus:
    status = SystemStatus(database=database_state(), redis=redis_state())
    if check_workers and status.redis.ok:
        status.workers = workers_state()
        status.workers_checked = True
    return status
