"""A hubsim server on a loopback port, with a root the test publishes into (the `hub` fixture, registered for every test by tests/conftest.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, stop_process, wait_for

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Hub:
    root: Path
    url: str
    proc: subprocess.Popen

    def requests(self) -> list[dict]:
        return httpx.get(f"{self.url}/hubsim/requests", timeout=5).json()

    def clear(self) -> None:
        httpx.delete(f"{self.url}/hubsim/requests", timeout=5).raise_for_status()

    def faults(self, **faults) -> dict:
        response = httpx.post(f"{self.url}/hubsim/faults", json=faults, timeout=5)
        response.raise_for_status()
        return response.json()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/hubsim/requests", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def serve_hub(root: Path, log_dir: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m hubsim serve` on a free port of 127.0.0.1 (its CDN on 127.0.0.2)."""
    port = free_port()
    argv = [sys.executable, "-m", "hubsim", "serve", "--root", str(root), "--port", str(port)]
    log = (log_dir / "hubsim.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(url), 30, "hubsim answers", proc=proc)
        yield url, proc
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture
def hub(tmp_path):
    root = tmp_path / "hub"
    root.mkdir()
    with serve_hub(root, tmp_path) as (url, proc):
        yield Hub(root=root, url=url, proc=proc)
