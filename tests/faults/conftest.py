"""Helpers for the fault scenarios that run real workers against real sparksim servers:
tiny suites (a job costs a few tenths of a second), the environment a worker needs to
share the test's database and runs directory, and SIGKILL of a worker with its pool."""

from __future__ import annotations

import psutil
from django.db import connection

from apps.benchmarks.models import Suite


def tiny_suite(name: str, *scenarios: tuple[str, int, int]) -> Suite:
    """Single-stream scenarios `(name, prompt, generated)`, one measured request each, no
    warm-up, no sweep: one Result row per scenario."""
    return Suite.objects.create(
        name=name,
        scenarios=[{"name": n, "prompt_tokens": p, "output_tokens": o} for n, p, o in scenarios],
        repetitions=1,
        warmup_requests=0,
        sweep_enabled=False,
    )


def worker_env(settings, **extra: str) -> dict[str, str]:
    """What a worker process needs to see what the test sees: the test database and the
    runs directory (where the process engine keeps its servers' pid files)."""
    return {
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        "SPARKPANEL_VAR_DIR": str(settings.VAR_DIR),
        **extra,
    }


def sim_servers(host) -> list[psutil.Process]:
    """Every sparksim process of this host on the machine (whatever its pid files say)."""
    marker = str(host.meminfo_file())
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if "sparksim" in cmdline and "serve" in cmdline and marker in cmdline:
            found.append(p)
    return found
