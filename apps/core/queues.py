"""The Celery queue names (one per Spark, and the light ``default`` queue).

One worker per Spark consumes only that host's queue ``host.<name>`` with concurrency 1
and prefetch 1, so container operations and benchmarks on one machine never overlap.
Light tasks go to ``default``. The Celery application itself is ``sparkpanel.celery``;
the names live here, low in the layers, because models and services route tasks by them.
"""

from __future__ import annotations

import re

DEFAULT_QUEUE = "default"
_HOST_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def host_queue(host_name: str) -> str:
    """The queue that only the named Spark's worker consumes."""
    if not _HOST_NAME.match(host_name):
        raise ValueError(
            f"invalid host name {host_name!r}: use lowercase letters, digits and dashes "
            "(at most 63 characters), as in a DNS label"
        )
    return f"host.{host_name}"
