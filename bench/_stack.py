"""Process-stack helpers shared by the benchmarks that run a throwaway panel as real processes
(bench.telemetry_fanout, bench.chat_relay) and by the sparksim benchmarks (free_port, pin,
start_sparksim)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pin(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and os.cpu_count() > 1 else []


class Stack:
    """Every process a benchmark starts; stop() ends them all (SIGTERM, then SIGKILL).

    With `one_at_a_time`, stop() ends each process (newest first) before signalling the
    next; otherwise it signals them all, then waits for each."""

    def __init__(self, tmp: Path, one_at_a_time: bool = False):
        self.tmp = tmp
        self.one_at_a_time = one_at_a_time
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = (self.tmp / f"{name}.log").open("w")
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        self.procs.append((name, proc))
        return proc

    def check(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")

    def tail(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self.one_at_a_time:
            for _, proc in reversed(self.procs):  # the web server first, Redis last
                if proc.poll() is None:
                    proc.terminate()
                _reap(proc)
            return
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            _reap(proc)


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def temp_stack(prefix: str, one_at_a_time: bool = False) -> Iterator[Stack]:
    """A Stack in a fresh temp directory. SIGTERM/SIGHUP end the run like Ctrl-C; on the way
    out every child is stopped, their log tails are printed if the body raised, and the
    directory is removed."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    stack = Stack(tmp, one_at_a_time=one_at_a_time)
    failed = True
    try:
        yield stack
        failed = False
    finally:
        stack.stop()
        if failed:
            for name, _ in stack.procs:
                print(f"--- {name} log (tail) ---\n{stack.tail(name)}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)


def wait_until(check, timeout: float, what: str, stack: Stack) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        stack.check()
        time.sleep(0.1)
    raise RuntimeError(f"gave up waiting for {what} after {timeout:.0f} s")


def manage(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def redis_ok(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def panel_env(tmp: Path) -> dict[str, str]:
    """This process's environment for a throwaway panel: temp SQLite and var dir, a unique
    CHANNELS_PREFIX."""
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(
        SPARKPANEL_VAR_DIR=str(tmp),
        DATABASE_URL=f"sqlite:///{tmp / 'bench.sqlite3'}",
        CHANNELS_PREFIX=f"bench-{uuid.uuid4().hex[:8]}",
        ALLOWED_HOSTS="127.0.0.1",
        DEBUG="false",
        PYTHONUNBUFFERED="1",
    )
    return env


def start_redis(stack: Stack, env: dict[str, str], cpu: int) -> subprocess.Popen | None:
    """A private redis-server (pinned to `cpu`) unless env already has a REDIS_URL; sets
    env["REDIS_URL"] and waits until Redis answers. Returns the process it started, if any."""
    proc = None
    if not env.get("REDIS_URL"):
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is not installed and REDIS_URL is not set")
        rport = free_port()
        proc = stack.start("redis", [*pin(cpu), server, "--port", str(rport), "--bind",
                           "127.0.0.1", "--save", "", "--appendonly", "no",
                           "--dir", str(stack.tmp)], env)  # fmt: skip
        env["REDIS_URL"] = f"redis://127.0.0.1:{rport}/0"
    wait_until(lambda: redis_ok(env["REDIS_URL"]), 15, "Redis", stack)
    return proc


def start_web(stack: Stack, env: dict[str, str], cpu: int) -> tuple[subprocess.Popen, str]:
    """The ASGI web server (uvicorn) on a free port, pinned to `cpu`, once /healthz answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    web = stack.start("web", [*pin(cpu), sys.executable, "-m", "uvicorn",
                      "sparkpanel.asgi:application", "--host", "127.0.0.1", "--port",
                      str(port), "--no-access-log"], env)  # fmt: skip
    wait_until(lambda: httpx.get(url + "/healthz", timeout=1).status_code < 500, 60,
               "the web server", stack)  # fmt: skip
    return web, url


def login(url: str, username: str, password: str, trust_env: bool = True) -> str:
    """A member's session cookie, through the real login form (CSRF included)."""
    with httpx.Client(base_url=url, timeout=30, trust_env=trust_env) as client:
        page = client.get("/accounts/login/")
        page.raise_for_status()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        if token is None:
            raise RuntimeError("no CSRF token on the login page")
        response = client.post("/accounts/login/", data={
            "csrfmiddlewaretoken": token.group(1), "username": username, "password": password})  # fmt: skip
        session = client.cookies.get("sessionid")
        if response.status_code != 302 or not session:
            raise RuntimeError(f"login failed: HTTP {response.status_code}")
        return session


def pct(values: list[float], q: float) -> float:
    """The q-th percentile of `values` (linear interpolation); nan when empty."""
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def med_range(values: list[float], fmt: str) -> str:
    """The median and the spread of `values` as 'median (min–max)', formatted with `fmt`."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def start_sparksim(argv: list[str], port: int, log: Path,
                   stop_waiting_on_exit: bool = False) -> tuple[subprocess.Popen, str]:  # fmt: skip
    """Start sparksim (`argv`, listening on `port`, output to `log`) and wait up to 60 s for
    /v1/models; with `stop_waiting_on_exit`, give up as soon as the process has exited."""
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
        if stop_waiting_on_exit and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("sparksim did not start:\n" + log.read_text()[-2000:])
