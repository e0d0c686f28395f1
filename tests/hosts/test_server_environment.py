"""A model server started by the process engine sees only an allowlisted environment: the
worker's secrets (Redis and database URLs with passwords, SECRET_KEY, tokens) never reach a
process that may run a checkpoint's own code (`--trust-remote-code`)."""

import os
import stat
import sys
from pathlib import Path

import httpx
import pytest

from apps.hosts.engines.base import LaunchSpec
from apps.hosts.engines.process import ProcessEngine, server_environment
from tests.conftest import free_port
from tests.hosts.conftest import logs_until

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
SIM_ARGS = ["--time-scale", "50", "--load-time-scale", "2000"]

# What a worker on a real deployment holds: none of it is a model server's business.
SECRETS = {
    "REDIS_URL": "redis://:redis-pass-7f3a@127.0.0.1:6390/5",
    "DATABASE_URL": "postgres://sparkpanel:pg-pass-91bc@postgres:5432/sparkpanel",
    "SECRET_KEY": "secret-key-5d2e-never-in-a-server",
    "METRICS_TOKEN": "metrics-token-c41f",
    "REDIS_PASSWORD": "redis-pass-7f3a",
    "POSTGRES_PASSWORD": "pg-pass-91bc",
    "WEBHOOK_SECRET_KEY": "webhook-key-0aa1",
    "HF_HUB_TOKEN": "hub-token-look-alike",
    "DJANGO_SETTINGS_MODULE": "sparkpanel.settings",
    "CELERY_BROKER_URL": "redis://:redis-pass-7f3a@127.0.0.1:6390/5",
    "VLLM_ENV": "HF_HUB_OFFLINE=1",  # the panel's own setting, not vLLM's
}
HF_TOKEN = "hf_gated-model-token-8e0d"


def _argv(port: int) -> list[str]:
    return ["vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", str(port),
            "--gpu-memory-utilization", "0.90", "--max-model-len", "8192", "--max-num-seqs", "2"]  # fmt: skip


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def _leaks(environ: dict[str, str]) -> list[str]:
    """Every secret value or name of SECRETS (or the token) found in `environ`."""
    found = [name for name in SECRETS if name in environ]
    for value in {*SECRETS.values(), HF_TOKEN} - {"sparkpanel.settings", "HF_HUB_OFFLINE=1"}:
        found += [f"{key} holds a secret" for key, held in environ.items() if value in held]
    return found


@pytest.fixture
def worker_env(monkeypatch):
    """The worker's environment with a real deployment's secrets in it."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def _serve(engine: ProcessEngine, run_id: int) -> tuple[int, int]:
    port = free_port()
    spec = LaunchSpec(run_id=run_id, host_name="sim", argv=_argv(port), image="x", port=port,
                      checkpoint={}, host_facts={})  # fmt: skip
    handle = engine.start(spec)
    logs_until(engine, handle, "Application startup complete.")
    return int(handle.ref.split(":")[0]), port


def _stop_all(engine: ProcessEngine) -> None:
    for managed in engine.list_managed():
        engine.stop(managed.handle, timeout=5)


def test_sparksim_gets_no_secret_of_the_worker_and_still_serves(worker_env, tmp_path):
    engine = ProcessEngine(runs_dir=tmp_path / "runs", simulated=True, sim_args=SIM_ARGS,
                           hf_token=HF_TOKEN)  # fmt: skip
    try:
        pid, port = _serve(engine, 1)
        environ = _environ(pid)
        assert _leaks(environ) == [], environ
        assert "HF_TOKEN" not in environ  # sparksim downloads nothing
        # What it does need is there: its facts, a PATH, the locale and the GPU selection.
        assert {"SPARKSIM_CHECKPOINT", "SPARKSIM_HOST", "PATH", "HOME"} <= environ.keys()
        assert environ["LC_ALL"] == "C.UTF-8" and environ["CUDA_VISIBLE_DEVICES"] == "0"
        assert httpx.get(f"http://127.0.0.1:{port}/version", timeout=10).json()["simulated"]
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == MODEL
        # Its log and pid file are the worker user's alone.
        for name in ("server.log", "pid.json"):
            mode = stat.S_IMODE((tmp_path / "runs" / "1" / name).stat().st_mode)
            assert mode & 0o077 == 0, f"{name} is {oct(mode)}"
        assert stat.S_IMODE((tmp_path / "runs" / "1").stat().st_mode) & 0o077 == 0
    finally:
        _stop_all(engine)


def test_a_real_vllm_gets_its_settings_and_the_hf_token_but_no_other_secret(worker_env, tmp_path):
    """The non-simulated path (`vllm serve`): a stand-in `vllm` that execs sparksim, so the
    process's environment is exactly what the engine gave `vllm`."""
    vllm = tmp_path / "bin" / "vllm"
    vllm.parent.mkdir()
    vllm.write_text(f'#!/bin/sh\nexec {sys.executable} -m sparksim "$@" {" ".join(SIM_ARGS)}\n')
    vllm.chmod(0o700)
    engine = ProcessEngine(
        runs_dir=tmp_path / "runs", simulated=False, vllm_executable=str(vllm),
        server_env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}, hf_token=HF_TOKEN,
    )  # fmt: skip
    try:
        pid, port = _serve(engine, 2)
        environ = _environ(pid)
        assert environ.get("HF_TOKEN") == HF_TOKEN  # where it is meant to go
        environ.pop("HF_TOKEN")
        assert _leaks(environ) == [], environ
        assert environ["VLLM_CPU_KVCACHE_SPACE"] == "1" and environ["HF_HUB_OFFLINE"] == "1"
        assert httpx.get(f"http://127.0.0.1:{port}/version", timeout=10).status_code == 200
    finally:
        _stop_all(engine)


def test_the_allowlist_keeps_what_a_server_needs_and_nothing_else():
    worker = {**SECRETS, "HF_TOKEN": HF_TOKEN, "PATH": "/usr/bin", "HOME": "/home/spark",
              "LANG": "C.UTF-8", "LC_CTYPE": "C.UTF-8", "TMPDIR": "/tmp", "HF_HOME": "/hf",
              "HF_HUB_OFFLINE": "1", "CUDA_HOME": "/usr/local/cuda", "NVIDIA_VISIBLE_DEVICES": "all",
              "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONPATH": "/app",
              "VIRTUAL_ENV": "/app/.venv", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "y"}  # fmt: skip
    assert set(server_environment(worker)) == {
        "PATH", "HOME", "LANG", "LC_CTYPE", "TMPDIR", "HF_HOME", "HF_HUB_OFFLINE", "CUDA_HOME",
        "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH",
    }  # fmt: skip
    assert server_environment(os.environ).keys() <= os.environ.keys()
