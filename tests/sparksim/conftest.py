"""Real sparksim processes for the tests, each on its own port, logs kept per test."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, free_port, stop_process, wait_for

NEMOTRON = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
NEMOTRON_FLAGS = [
    "--gpu-memory-utilization",
    "0.85",
    "--max-model-len",
    "131072",
    "--max-num-seqs",
    "4",
]


@dataclass
class Sim:
    proc: subprocess.Popen
    url: str
    log_path: Path
    model: str
    api_key: str = ""  # the server's VLLM_API_KEY ("": open)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text()

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 60), **kwargs)

    def ready(self) -> bool:
        try:
            response = httpx.get(self.url + "/v1/models", headers=self.headers, timeout=1)
            return response.status_code == 200
        except httpx.HTTPError:
            return False

    def metrics(self) -> dict[tuple[str, tuple], float]:
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.url + "/metrics", timeout=5).text
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(
                    sorted(
                        (k, v)
                        for k, v in sample.labels.items()
                        if k not in ("model_name", "engine")
                    )
                )
                out[(sample.name, labels)] = sample.value
        return out

    def stop(self) -> int:
        return stop_process(self.proc, timeout=10)


def launch(tmp: Path, *args: str, model: str = NEMOTRON, time_scale: float = 1, load_scale: float = 100_000,
           jit: float | None = 0, ready: bool = True, timeout: float = 60,
           api_key: str = "", env: dict[str, str] | None = None) -> Sim:  # fmt: skip
    # A --port in args (the panel's own vector) wins over a fresh one.
    port = int(args[args.index("--port") + 1]) if "--port" in args else free_port()
    host_port = [] if "--port" in args else ["--host", "127.0.0.1", "--port", str(port)]
    argv = [sys.executable, "-m", "sparksim", "serve", model, *host_port,
            "--time-scale", str(time_scale), "--load-time-scale", str(load_scale), *args]  # fmt: skip
    if jit is not None:
        argv += ["--jit-seconds", str(jit)]
    log = tmp / f"sparksim-{port}.log"
    env = {**os.environ, **(env or {}), **({"VLLM_API_KEY": api_key} if api_key else {})}
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env)  # fmt: skip
    sim = Sim(proc, f"http://127.0.0.1:{port}", log, model, api_key)
    if ready:
        try:
            wait_for(sim.ready, timeout, f"sparksim ready (log {log})", proc)
        except AssertionError:
            sim.stop()
            raise AssertionError(f"sparksim did not become ready:\n{sim.log()[-3000:]}") from None
    return sim


@pytest.fixture
def start_sim(tmp_path):
    sims: list[Sim] = []

    def start(*args: str, **kwargs) -> Sim:
        sim = launch(tmp_path, *args, **kwargs)
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory):
    """Nemotron-3-Super at 20× speed, shared by a module's API tests."""
    sim = launch(tmp_path_factory.mktemp("sim"), *NEMOTRON_FLAGS, time_scale=20)
    yield sim
    sim.stop()
