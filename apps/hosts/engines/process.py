"""The process engine: `vllm serve` (or sparksim) as a local subprocess.

Argument lists only (never a shell string), its own process group (so a stop reaches
every child), output in var/runs/<id>/server.log, and a pid file with the process's start
time so that a restarted worker can find it again and never mistakes a recycled pid for it.

The server gets an allowlisted environment (`server_environment`), never the worker's
whole one: the worker holds REDIS_URL, DATABASE_URL, SECRET_KEY and other passwords, and
a model server may run a checkpoint's own code (`--trust-remote-code`). Its files (the
log, the pid file) are the worker user's alone (0600 in a 0700 directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from apps.hosts.engines.base import (
    ROLE_RAY,
    ROLE_SERVER,
    Engine,
    EngineError,
    Handle,
    LaunchSpec,
    Managed,
    RayNodeSpec,
    State,
    Status,
    sim_args_for,
    sim_env,
)
from ray_adapter import link as ray_link
from ray_adapter import nodes as ray_nodes
from ray_adapter import probe as ray_probe
from sparkdomain.command import UnsafeCommand, assert_safe_argv
from sparkdomain.model_refs import server_model_dirs

ROOT = Path(__file__).resolve().parents[3]
# What a model server takes from the worker's environment: what a Python program, the CUDA
# stack and vLLM's caches need to run. Everything else (the panel's settings and secrets)
# stays behind; vLLM's own settings come from the worker's VLLM_ENV (`server_env`), the
# Hugging Face token from HF_TOKEN (`hf_token`), and only to a real vLLM.
SERVER_ENV_NAMES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
        "LD_LIBRARY_PATH", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR",
        "HF_HOME", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE",
        "HUGGINGFACE_HUB_CACHE", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "DO_NOT_TRACK",
        "SSL_CERT_FILE", "SSL_CERT_DIR",
        # make run's mark on everything it started (tools/devrun.py stops what carries it).
        "SPARKPANEL_DEVRUN_ID",
    }
)  # fmt: skip
SERVER_ENV_PREFIXES = ("LC_", "HF_HUB_", "CUDA_", "NVIDIA_", "NCCL_", "TORCH_", "TRITON_")
# A prefixed name that still looks like a credential stays behind too (HF_HUB_TOKEN…).
_CREDENTIAL_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "_KEY", "CREDENTIAL")


def server_environment(worker_env: Mapping[str, str]) -> dict[str, str]:
    """The part of the worker's environment a model server may see (the allowlist)."""
    out = {}
    for key, value in worker_env.items():
        if key in SERVER_ENV_NAMES or (
            key.startswith(SERVER_ENV_PREFIXES)
            and not any(word in key.upper() for word in _CREDENTIAL_WORDS)
        ):
            out[key] = value
    return out


# Children we started in this process: their exit codes (psutil cannot tell them later).
_children: dict[int, subprocess.Popen] = {}


def _private_file(path: Path, flags: int) -> int:
    """A file descriptor for writing `path`, 0600 whatever the umask (and made so if an
    older version left it readable)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


class ProcessEngine(Engine):
    name = "process"

    def __init__(
        self,
        *,
        runs_dir: Path,
        simulated: bool = True,
        sim_args: list[str] | None = None,
        vllm_executable: str = "vllm",
        server_env: dict[str, str] | None = None,
        hf_token: str = "",
        host_name: str = "",
        hf_home: str = "",
        model_folders: list[str] | None = None,
    ):
        self.host_name = host_name
        # The host's model folders (Host.model_folders): read where they lie.
        self.model_folders = list(model_folders or [])
        # The host's Hugging Face cache (where the worker downloaded the weights): the
        # server's HF_HOME; blank leaves the worker's own (or vLLM's default).
        self.hf_home = hf_home
        self.runs_dir = Path(runs_dir)
        self.simulated = simulated
        self.sim_args = list(sim_args or [])
        self.vllm_executable = vllm_executable
        # The worker's environment for real vLLM (settings.VLLM_ENV: an offline Hugging
        # Face cache, a CPU KV cache size…); sparksim does not need it.
        self.server_env = dict(server_env or {})
        # Gated models: for a real vLLM only (sparksim downloads nothing).
        self._hf_token = hf_token
        # Handle → run directory, so following a log does not rescan every pid file.
        self._dirs: dict[Handle, Path] = {}

    @property
    def model_dirs(self) -> tuple[str, ...]:
        """Where a recipe's local model or tokenizer may lie: the host's Hugging Face cache,
        the server's HF_HOME, and its model folders (none set: Hub ids only)."""
        return server_model_dirs(self.hf_home, in_container=False, folders=self.model_folders)

    def command(self, argv: list[str], spec: LaunchSpec | None = None) -> list[str]:
        """The same vector vLLM gets; only the executable differs."""
        try:  # the last line of defence, whoever built the vector
            assert_safe_argv(argv, model_dirs=self.model_dirs)
        except UnsafeCommand as exc:
            raise EngineError(f"refused to start: {exc}") from None
        if self.simulated:
            sim_args = sim_args_for(spec, self.sim_args) if spec else self.sim_args
            return [sys.executable, "-m", "sparksim", *argv[1:], *sim_args]
        return [self.vllm_executable, *argv[1:]]

    def _ray_executable(self) -> str:
        """The `ray` beside the Python that runs the model server: sparksim's venv, or
        the native vLLM's (its Ray is the one vLLM was installed with)."""
        if self.simulated:
            return str(Path(sys.executable).with_name("ray"))
        vllm = Path(self.vllm_executable)
        return str(vllm.with_name("ray")) if vllm.parent != Path() else "ray"

    def _python(self) -> str:
        if self.simulated:
            return sys.executable
        vllm = Path(self.vllm_executable)
        return str(vllm.with_name("python")) if vllm.parent != Path() else "python3"

    def _dir(self, run_id: int) -> Path:
        return self.runs_dir / str(run_id)

    def start(self, spec: LaunchSpec) -> Handle:
        if spec.mods:  # the admission refuses them first (apps/runs/mods.py); never silently
            raise EngineError("a local server has no container to apply mods in")
        command = self.command(spec.argv, spec)
        run_dir = self._dir(spec.run_id)
        existing = self._running_in(run_dir)
        if existing is not None:
            # A redelivered start task: never a second server for one run.
            return existing
        env = server_environment(os.environ)
        if not self.simulated:
            env.update(self.server_env)
            if self._hf_token:
                env["HF_TOKEN"] = self._hf_token
            if self.hf_home:
                env["HF_HOME"] = self.hf_home
        else:
            env.update(sim_env(spec))
        env.update(spec.env)
        return self._spawn(command, env, run_dir, spec.run_id, spec.host_name)

    def _running_in(self, run_dir: Path) -> Handle | None:
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        existing = self._handle_from_pidfile(run_dir)
        if existing is not None and self.status(existing).state is State.RUNNING:
            return existing
        return None

    def _spawn(
        self, command: list[str], env: dict[str, str], run_dir: Path, run_id: int, host: str
    ) -> Handle:
        """Start `command` in its own process group, its output in run_dir/server.log and
        its identity (pid and start time) in run_dir/pid.json."""
        env["PYTHONUNBUFFERED"] = "1"
        log = os.fdopen(_private_file(run_dir / "server.log", os.O_APPEND), "ab")
        try:
            proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise EngineError(f"could not start {command[0]}: {exc}") from None
        finally:
            log.close()
        _children[proc.pid] = proc
        created = psutil.Process(proc.pid).create_time()
        handle = Handle(self.name, f"{proc.pid}:{created:.2f}")
        self._dirs[handle] = run_dir
        record = {"pid": proc.pid, "create_time": created, "run_id": run_id, "host": host,
                  "command": command}  # fmt: skip
        with os.fdopen(_private_file(run_dir / "pid.json", os.O_TRUNC), "w") as fh:
            fh.write(json.dumps(record))
        return handle

    def start_ray_node(self, spec: RayNodeSpec) -> Handle:
        """`ray start --block` for this host's side of a pair run, in
        var/runs/<id>/ray-<host>/ (a simulated pair's two sides share one machine); its own
        process group, so a stop reaches the raylet and the ranks it started."""
        run_dir = self._dir(spec.run_id) / f"{ROLE_RAY}-{spec.host_name}"
        existing = self._running_in(run_dir)
        if existing is not None:
            return existing
        command = ray_nodes.start_argv(spec.node, self._ray_executable())
        env = server_environment(os.environ)
        if not self.simulated:
            env.update(self.server_env)
        env.update(ray_nodes.node_env(spec.node))
        env.update(spec.env)
        return self._spawn(command, env, run_dir, spec.run_id, spec.host_name)

    def check_link(self, spec: RayNodeSpec, timeout: float = 60) -> str:
        """This worker runs on the Spark, so the check runs here, with the node's Python."""
        argv = ray_link.link_argv(self._python(), spec.node.nccl_interface, spec.node.node_ip)
        try:
            done = subprocess.run(
                argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                stdin=subprocess.DEVNULL, env=server_environment(os.environ),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return "the link check did not answer in time"
        except OSError as exc:
            raise EngineError(f"could not run the link check: {exc}") from None
        return (done.stdout + done.stderr[-2000:])[-ray_link.MAX_OUTPUT :]

    def probe_cluster(self, handle: Handle, head_address: str, timeout: float = 60) -> str:
        env = server_environment(os.environ)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        try:
            done = subprocess.run(
                ray_probe.probe_argv(self._python(), head_address), cwd=ROOT, env=env,
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return '{"error": "the probe did not answer in time"}'
        except OSError as exc:
            raise EngineError(f"could not run the Ray probe: {exc}") from None
        return done.stdout[-ray_probe.MAX_OUTPUT :]

    def _handle_from_pidfile(self, run_dir: Path) -> Handle | None:
        try:
            data = json.loads((run_dir / "pid.json").read_text())
        except (OSError, ValueError):
            return None
        return Handle(self.name, f"{data['pid']}:{data['create_time']:.2f}")

    @staticmethod
    def _pid_host(pidfile: Path) -> str:
        try:
            return json.loads(pidfile.read_text()).get("host", "")
        except (OSError, ValueError):
            return ""

    def _process(self, handle: Handle) -> psutil.Process | None:
        pid_text, _, created = handle.ref.partition(":")
        try:
            proc = psutil.Process(int(pid_text))
            same = abs(proc.create_time() - float(created)) < 0.05
            if same and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except (psutil.Error, ValueError):
            return None
        return None

    def status(self, handle: Handle) -> Status:
        pid = int(handle.ref.partition(":")[0])
        child = _children.get(pid)
        if child is not None:
            code = child.poll()
            return Status(State.RUNNING) if code is None else Status(State.EXITED, code)
        if self._process(handle) is not None:
            return Status(State.RUNNING)
        # Not our child (a restarted worker): it is gone, its exit code unknowable.
        return Status(State.EXITED, None)

    def _pidfiles(self) -> list[Path]:
        """Every managed thing's pid file: servers, and pair runs' Ray nodes."""
        return sorted([*self.runs_dir.glob("*/pid.json"),
                       *self.runs_dir.glob(f"*/{ROLE_RAY}-*/pid.json")])  # fmt: skip

    def log_path(self, handle: Handle) -> Path | None:
        run_dir = self._dirs.get(handle)
        if run_dir is None:
            for pidfile in self._pidfiles():
                if self._handle_from_pidfile(pidfile.parent) == handle:
                    run_dir = self._dirs[handle] = pidfile.parent
                    break
        return None if run_dir is None else run_dir / "server.log"

    def read_logs(self, handle: Handle, cursor: int) -> tuple[list[str], int]:
        path = self.log_path(handle)
        if path is None or not path.exists():
            return [], cursor
        with path.open("rb") as fh:
            fh.seek(cursor)
            data = fh.read()
        end = data.rfind(b"\n")
        if end < 0:
            return [], cursor
        lines = data[: end + 1].decode("utf-8", "replace").splitlines()
        return lines, cursor + end + 1

    def stop(self, handle: Handle, *, timeout: float = 30.0) -> None:
        proc = self._process(handle)
        pid = int(handle.ref.partition(":")[0])
        if proc is None:
            self._reap(pid)
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._reap(pid) or self._process(handle) is None:
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self._reap(pid, wait=5)

    def kill(self, handle: Handle) -> None:
        """SIGKILL the whole process group at once."""
        if self._process(handle) is None:
            return
        pid = int(handle.ref.partition(":")[0])
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self._reap(pid, wait=5)

    def _reap(self, pid: int, wait: float = 0) -> bool:
        child = _children.get(pid)
        if child is None:
            return False
        try:
            child.wait(timeout=wait) if wait else child.poll()
        except subprocess.TimeoutExpired:
            return False
        return child.returncode is not None

    def remove(self, handle: Handle) -> None:
        """Forget the process (logs stay for the run's failure report)."""
        path = self.log_path(handle)
        if path is not None:
            (path.parent / "pid.json").unlink(missing_ok=True)
        self._dirs.pop(handle, None)
        _children.pop(int(handle.ref.partition(":")[0]), None)

    def list_managed(self) -> list[Managed]:
        managed = []
        for pidfile in self._pidfiles():
            handle = self._handle_from_pidfile(pidfile.parent)
            if handle is None:
                continue
            if self.host_name and self._pid_host(pidfile) not in ("", self.host_name):
                continue  # another host's server (hosts may share one machine)
            role = ROLE_RAY if pidfile.parent.name.startswith(f"{ROLE_RAY}-") else ROLE_SERVER
            run_dir = pidfile.parent.parent if role == ROLE_RAY else pidfile.parent
            try:
                run_id = int(run_dir.name)
            except ValueError:
                continue
            managed.append(Managed(run_id, handle, self.status(handle), role))
        return managed

    def list_unmanaged(self) -> list[dict]:
        """vLLM or sparksim servers on this machine that no run of the panel started."""
        ours = set()
        for pidfile in self._pidfiles():
            handle = self._handle_from_pidfile(pidfile.parent)
            if handle is not None:
                ours.add(int(handle.ref.partition(":")[0]))
        out = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["pid"] in ours or "serve" not in cmdline[:4]:
                continue
            words = " ".join(cmdline[:4])
            if "vllm" not in words and "sparksim" not in words:
                continue
            out.append(
                {"id": str(proc.info["pid"]), "name": f"pid {proc.info['pid']}",
                 "image": " ".join(cmdline[:5])[:120], "status": proc.info["status"]}
            )  # fmt: skip
        return out
