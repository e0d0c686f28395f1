"""Each parallel test worker's own slice of this machine's shared services.

`make test` runs the suite in several pytest-xdist workers (tools/test.sh). They share one
Redis server, one Docker engine and this machine's ports, so each worker gets:

- its own Redis database (the Celery broker and results, the Channels layer, the gateway's
  limits): worker gwN uses database N + 1 of the test Redis, the controller and a serial
  run database 0 — a worker's Celery tasks and pushes never reach another's;
- its own window of run ports: every range a test's host opens servers in is shifted by
  `PORT_SHIFT` (worker gwN: -5000 × N, below Linux's ephemeral ports), so two workers never
  hand the same free port to two servers starting at once.

Tests that share one thing that cannot be sliced (the Docker engine's host names, the one
real vLLM server, the browser tests' live server, the Ray clusters on 127.0.0.2/3) run in
one worker: tests/conftest.py puts them in xdist groups.

Loaded with `-p tests.isolation` (tools/test.sh passes it), so it runs before Django reads
its settings: REDIS_URL must be the worker's own by then.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", … under xdist
INDEX = int(WORKER[2:]) if WORKER.startswith("gw") and WORKER[2:].isdigit() else 0
PORT_SHIFT = -5000 * INDEX
MAX_WORKERS = 4  # ports 20000–24999 shifted 3 × 5000 down still clear 1024; 15 Redis DBs


def worker_redis_url(url: str, index: int) -> str:
    """`url` with its database number replaced by the worker's (index + 1)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{index + 1}"))


if WORKER:
    if INDEX >= MAX_WORKERS:
        raise RuntimeError(
            f"tests/isolation.py gives at most {MAX_WORKERS} workers their own ports; "
            f"this is {WORKER}"
        )
    os.environ["REDIS_URL"] = worker_redis_url(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), INDEX
    )
    os.environ["SPARKPANEL_TEST_ISOLATED"] = WORKER
