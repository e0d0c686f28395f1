"""The simulated Sparks `make run` serves: their names, in one place for the seed command
(which creates them) and tools/devrun.py (which starts a worker and a host agent for each).
Django-free: devrun reads it before any settings exist."""

from __future__ import annotations

import os

# Two by default, so side-by-side chat, the arena, replicas and the pages that compare
# Sparks work on a first `make run`; DEMO_SPARKS=1 serves one (a small machine).
DEFAULT_SPARKS = 2
MAX_SPARKS = 4
# Each simulated Spark's own window of model-server ports (they share this machine).
FIRST_PORT = 8100
PORTS_PER_SPARK = 100


class DemoConfigError(ValueError):
    """DEMO_HOST / DEMO_SPARKS hold something unusable; the message says what."""


def demo_hosts(environ: dict[str, str] | None = None) -> list[str]:
    """`local-sim`, `local-sim-2`, … (DEMO_HOST names the first, DEMO_SPARKS how many)."""
    environ = os.environ if environ is None else environ
    first = environ.get("DEMO_HOST", "local-sim").strip() or "local-sim"
    raw = environ.get("DEMO_SPARKS", str(DEFAULT_SPARKS)).strip()
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SPARKS:
        raise DemoConfigError(f"DEMO_SPARKS={raw!r}: give a number from 1 to {MAX_SPARKS}")
    return [first] + [f"{first}-{n}" for n in range(2, int(raw) + 1)]


def port_window(index: int) -> tuple[int, int]:
    """The model-server ports of the index-th simulated Spark (0-based)."""
    low = FIRST_PORT + index * PORTS_PER_SPARK
    return low, low + PORTS_PER_SPARK - 1
