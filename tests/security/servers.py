"""The panel's web server started as `make run` starts it, for the tests that need a real
uvicorn in its own process (tests/security/test_edge.py, test_connection_caps.py)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import ROOT, free_port, stop_process, wait_for


def devrun():
    """tools/devrun.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("devrun_for_tests", ROOT / "tools/devrun.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def web_server(env: dict, log: Path) -> Iterator[tuple[subprocess.Popen, int]]:
    """uvicorn with make run's own vector (`devrun.web_argv`: its limits, the panel's HTTP
    protocol, its proxy flags for env's FORWARDED_ALLOW_IPS), until it answers /healthz."""
    port = free_port()
    argv = devrun().web_argv("127.0.0.1", port, env)
    argv[0] = sys.executable
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)  # fmt: skip

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code in (
                200, 503,
            )  # fmt: skip
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, f"uvicorn (log: {log})", proc)
        yield proc, port
    finally:
        stop_process(proc, timeout=10)
