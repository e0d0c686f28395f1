from __future__ import annotations

import time

from celery import shared_task
from django.db import connection


@shared_task(name="core.health", bind=True)
def health(self, echo: str = "") -> dict:
    """Proves the wiring: a worker took the message from its queue, reached the database
    and answered through the result backend."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        db_ok = cursor.fetchone() == (1,)
    delivery = self.request.delivery_info or {}
    return {
        "echo": echo,
        "worker": self.request.hostname,
        "queue": delivery.get("routing_key"),
        "db": db_ok,
        "time": time.time(),
    }
