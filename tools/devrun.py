"""Run the whole panel in the foreground: Redis first (when none is running), then the
database's migrations and the demo data (an admin account, two simulated Sparks), the ASGI
web server, a Celery worker, each simulated Spark's worker and host agent, and Celery beat;
the URL and the new admin account's password are the last lines it prints. Quiet by
default (warnings and errors only); VERBOSE=1 shows every process's INFO lines.
Ctrl-C (or SIGTERM/SIGHUP) stops every process this script started within seconds: all at
once, SIGKILL after 5 s, then the simulated host's model servers (their runs marked stopped),
then anything else that carries this run's mark (SPARKPANEL_DEVRUN_ID), Redis last; if any of
them dies, the rest are stopped too and the exit status says so.

var/ (the database with its sessions, Redis' data, run logs, the secret key) is the user's
alone: 0700, every file in it without group or other access (an older install's too), and
everything this script and its children create from then on 0600 (umask 077).

Used by `make run`; not meant for production (see docker-compose.yml for that).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sparkdomain.demo import DemoConfigError, demo_hosts  # noqa: E402
from sparkpanel.env import env_str, load_dotenv  # noqa: E402

PY = sys.executable
# A head complete within HTTP_HEADER_TIMEOUT s and at most 16 KiB, idle keep-alive
# connections closed after 5 s, at most 512 connections, WebSocket messages up to 1 MiB
# (sparkpanel/httpserver.py; docs/security.md, "Bounded input").
UVICORN_LIMITS = [
    "--http", "sparkpanel.httpserver:HttpToolsBoundedProtocol",
    "--h11-max-incomplete-event-size", "16384",
    "--timeout-keep-alive", "5",
    "--limit-concurrency", "512",
    "--ws-max-size", "1048576",
]  # fmt: skip
# Ctrl-C: every child gets SIGTERM at once and this long to exit before SIGKILL. A worker
# in the middle of a model load would otherwise wait for the load (minutes on a real Spark).
STOP_GRACE_S = 5.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# Every process this script starts carries it in its environment, the model servers the
# simulated host's worker starts too (the process engine lets it through): what is still
# there after the stop is ours, whatever pid files say.
MARK = "SPARKPANEL_DEVRUN_ID"
PRIVATE_UMASK = 0o077
# Where `make run` records the Redis it serves with, for manage.py's commands run beside it
# (sparkpanel/settings.py reads it when neither the environment nor .env names one).
RUN_ENV_FILE = "make-run.env"


class Child:
    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name = name
        self.argv = argv
        # Own session: the terminal's Ctrl-C reaches only us, and we stop children in order.
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """To its whole process group (a Celery worker's pool processes too)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


def stop_all(children: list[Child], timeout: float = STOP_GRACE_S) -> None:
    """SIGTERM to all at once, SIGKILL to whatever is left after `timeout` seconds."""
    running = [c for c in children if c.alive()]
    for child in running:
        child.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        running = [c for c in running if c.alive()]
        time.sleep(0.05)
    for child in running:
        print(f"[devrun] {child.name} did not stop in {timeout:.0f}s; killing it", flush=True)
        child.signal(signal.SIGKILL)
    for child in running:
        try:
            child.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            print(f"[devrun] {child.name} (pid {child.proc.pid}) is still there", flush=True)


def make_private(var_dir: Path, database_url: str = "") -> None:
    """From now on this process and its children create files 0600 and directories 0700;
    var/ and whatever an older `make run` left in it lose group and other access (symbolic
    links are left alone: a vLLM venv linked from elsewhere is not ours to change). A SQLite
    database outside var/ is fixed too (its WAL and shared memory take its mode)."""
    os.umask(PRIVATE_UMASK)
    var_dir.mkdir(parents=True, exist_ok=True)
    paths = [var_dir]
    for top, dirs, files in os.walk(var_dir):
        paths += [Path(top, name) for name in (*dirs, *files)]
    if database_url.startswith("sqlite:///"):
        db = ROOT / database_url.removeprefix("sqlite:///")  # relative: to the checkout
        paths += [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                os.chmod(path, stat.S_IMODE(mode) & ~0o077)
        except FileNotFoundError:
            continue  # gone meanwhile (a WAL checkpointed away), or never there


def marked_processes(mark: str, keep: set[int]) -> list:
    """Processes of this user whose environment carries this run's mark, but those in keep."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid() or proc.pid in keep:
            continue
        try:
            if proc.environ().get(MARK) == mark:
                found.append(proc)
        except psutil.Error:  # another user's, or gone
            continue
    return found


def stop_marked(mark: str, keep: set[int], timeout: float = STOP_GRACE_S) -> None:
    """Whatever but `keep` (Redis) still carries the mark once everything else stopped (a
    model server whose pid file is gone, one a worker started as it was being killed): its
    process group gets SIGTERM, SIGKILL after `timeout` seconds."""
    import psutil

    left = marked_processes(mark, keep)
    if not left:
        return
    print(f"[devrun] stopping {len(left)} leftover process(es): "
          f"{', '.join(str(p.pid) for p in left)}", flush=True)  # fmt: skip
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in left:
            with contextlib.suppress(OSError, psutil.Error):
                os.killpg(os.getpgid(proc.pid), sig)
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)  # its own group may not be the one it was started in
        _gone, left = psutil.wait_procs(left, timeout=timeout)
        if not left:
            return


def stop_simulated_servers(hosts: list[str], env: dict[str, str]) -> None:
    """The simulated hosts' model servers run in sessions of their own (a worker restart must
    not kill a loaded model), so stopping the worker leaves them: stop them by the process
    engine's pid files and mark their runs stopped (manage.py mark_stopped)."""
    argv = [PY, "manage.py", "mark_stopped", "--timeout", "2"]
    for host in hosts:
        argv += ["--host", host]
    try:
        subprocess.run(argv, cwd=ROOT, env=env, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"[devrun] could not stop the simulated hosts' servers: {exc}", flush=True)


def verbose(env: Mapping[str, str]) -> bool:
    """VERBOSE=1: every process logs at INFO (Celery's banners and beat's lines too)."""
    return env.get("VERBOSE", "").strip().lower() in {"1", "true", "yes", "on"}


def celery_argv(env: Mapping[str, str], command: str) -> list[str]:
    """`celery … worker|beat`, quiet (no banner, warnings and errors only) unless VERBOSE."""
    if verbose(env):
        return [PY, "-m", "celery", "-A", "sparkpanel", command, "-l", "INFO"]
    return [PY, "-m", "celery", "--quiet", "-A", "sparkpanel", command, "-l", "WARNING"]


def worker_argv(queue: str, name: str, env: Mapping[str, str] | None = None) -> list[str]:
    """A Celery worker in the production shape: one queue, one task at a time."""
    return [*celery_argv(os.environ if env is None else env, "worker"), "-Q", queue,
            "-n", f"{name}@%h", "-c", "1", "--prefetch-multiplier", "1"]  # fmt: skip


def beat_argv(env: Mapping[str, str]) -> list[str]:
    return celery_argv(env, "beat")


def proxy_flags(trusted: str) -> list[str]:
    """uvicorn believes X-Forwarded-For/-Proto only from the proxies FORWARDED_ALLOW_IPS
    lists, and from nobody when it is unset. (uvicorn's own default trusts 127.0.0.1 and
    ::1: any local process, or a user through an SSH tunnel, could name its own address —
    escaping the login lockout and writing a false one into the audit log.) The same rule
    as tools/container-start.sh."""
    addresses = ",".join(part.strip() for part in trusted.split(",") if part.strip())
    if not addresses:
        return ["--no-proxy-headers"]
    return ["--proxy-headers", "--forwarded-allow-ips", addresses]


def web_argv(host: str, port: int, env: Mapping[str, str]) -> list[str]:
    """The web server as `make run` starts it (tests/test_make_run.py starts it so too)."""
    return [
        PY, "-m", "uvicorn", "sparkpanel.asgi:application", "--host", host, "--port", str(port),
        "--no-access-log", "--log-level", "info" if verbose(env) else "warning",
        # Open WebSockets must not hold Ctrl-C up (the default waits for them).
        "--timeout-graceful-shutdown", "2",
        # Bounded connections: the same flags as tools/container-start.sh.
        *UVICORN_LIMITS,
        *proxy_flags(env.get("FORWARDED_ALLOW_IPS", "")),
    ]  # fmt: skip


def redis_reachable(url: str) -> bool:
    from apps.core import redisconn  # the panel's one door to Redis (no Django)

    return redisconn.ping(url) is None


def wait_until(check, timeout: float, what: str, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        dead = [c.name for c in children if not c.alive()]
        if dead:
            raise SystemExit(f"[devrun] {', '.join(dead)} exited while waiting for {what}")
        time.sleep(0.25)
    raise SystemExit(f"[devrun] gave up waiting for {what} after {timeout:.0f}s")


def lan_hosts() -> list[str]:
    """Names and addresses this machine is reached by on the LAN, for ALLOWED_HOSTS."""
    import psutil

    hosts = {"localhost", "127.0.0.1", "[::1]", socket.gethostname(), socket.getfqdn()}
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family == socket.AF_INET:
                hosts.add(addr.address)
            elif addr.family == socket.AF_INET6 and not addr.address.startswith("fe80"):
                hosts.add(f"[{addr.address}]")
    return sorted(h for h in hosts if h)


def record_redis_url(var_dir: Path, url: str) -> None:
    """var/make-run.env names the Redis this `make run` serves with (0600: a URL may carry
    a password), so `manage.py createuser` and the other commands find it."""
    path = var_dir / RUN_ENV_FILE
    path.write_text(f"# written by make run (tools/devrun.py)\nREDIS_URL={url}\n", encoding="utf-8")
    path.chmod(0o600)


def manage_step(argv: list[str], env: dict[str, str], what: str) -> str:
    """One manage.py command before the servers start; its output, or exit saying why."""
    done = subprocess.run(
        [PY, "manage.py", *argv], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(
            f"[devrun] {what} failed (manage.py {' '.join(argv)}: status {done.returncode})"
        )
    if done.stderr.strip():
        sys.stderr.write(done.stderr)
    return done.stdout


def main() -> int:
    quiet_by_default = "LOG_LEVEL" not in os.environ
    load_dotenv(ROOT / ".env")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default=env_str("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env_str("PORT", "8000")))
    parser.add_argument(
        "--private-var", action="store_true", help="only make var/ private, then exit"
    )
    args = parser.parse_args()

    var_dir = Path(env_str("SPARKPANEL_VAR_DIR", str(ROOT / "var")))
    make_private(var_dir, env_str("DATABASE_URL", ""))
    if args.private_var:
        return 0
    env = dict(os.environ)
    env[MARK] = f"{os.getpid()}-{secrets.token_hex(8)}"
    env["PYTHONUNBUFFERED"] = "1"
    if quiet_by_default and not verbose(env):
        env["LOG_LEVEL"] = "WARNING"  # .env.example's INFO is for a server's logs
    if not verbose(env) and os.getuid() == 0:
        # Said once here, not by every Celery process (a container or CI runs as root).
        print("[devrun] running as root: Celery advises a user of its own", flush=True)
        env["PYTHONWARNINGS"] = "ignore:You're running the worker with superuser privileges"
    try:
        sims = demo_hosts(env)
    except DemoConfigError as exc:
        raise SystemExit(f"[devrun] {exc}") from exc
    redis_url = env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    if args.host in {"0.0.0.0", "::"} and "ALLOWED_HOSTS" not in env:
        env["ALLOWED_HOSTS"] = ",".join(lan_hosts())
        print(f"[devrun] serving the LAN; ALLOWED_HOSTS={env['ALLOWED_HOSTS']}", flush=True)

    children: list[Child] = []
    stopping = False

    sim_hosts: list[str] = []  # those whose workers started (their servers stop with us)

    def shutdown(signum=None, frame=None):
        nonlocal stopping
        if stopping:
            return
        stopping = True
        print("\n[devrun] stopping: " + ", ".join(c.name for c in reversed(children)), flush=True)
        # Everything but Redis at once (mark_stopped's pushes still reach it), then Redis.
        stop_all([c for c in children if c.name != "redis"])
        if sim_hosts:
            stop_simulated_servers(sim_hosts, env)
        stop_marked(env[MARK], keep={c.proc.pid for c in children if c.name == "redis"})
        stop_all([c for c in children if c.name == "redis"])
        print("[devrun] all processes stopped", flush=True)

    def on_signal(signum, frame):
        if stopping:
            return  # a second Ctrl-C while stopping: the stop is already under way
        shutdown()
        sys.exit(0)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    try:
        if not redis_reachable(redis_url):
            parsed = urlparse(redis_url)
            if parsed.hostname not in LOCAL_HOSTS:
                raise SystemExit(f"[devrun] Redis at {redis_url} is unreachable; start it first")
            server = _which("redis-server")
            data = var_dir / "redis"
            data.mkdir(parents=True, exist_ok=True)
            print(
                f"[devrun] starting a private Redis on port {parsed.port or 6379} (data in {data})"
            )
            children.append(
                Child(
                    "redis",
                    [
                        server,
                        "--port",
                        str(parsed.port or 6379),
                        "--bind",
                        "127.0.0.1",
                        "--dir",
                        str(data),
                        "--appendonly",
                        "yes",
                        "--save",
                        "",
                        "--maxmemory-policy",
                        "noeviction",
                        # its own log: the console shows the panel's warnings, not Redis'
                        *([] if verbose(env) else ["--logfile", str(data / "redis.log")]),
                    ],
                    env,
                )
            )
            wait_until(lambda: redis_reachable(redis_url), 15, "Redis", children)
        # Redis first: everything after it (the seed's hosts, the servers) tells the gateway
        # and the pages through it, and would warn of every refused connection otherwise.
        print(f"[devrun] Redis answers at {_redacted(redis_url)}", flush=True)
        record_redis_url(var_dir, redis_url)
        manage_step(["migrate", "--noinput", "-v", "0"], env, "migrating the database")
        seeded = manage_step(["seed_demo"], env, "seeding the demo data")

        children.append(Child("web", web_argv(args.host, args.port, env), env))
        children.append(Child("worker", worker_argv("default", "default", env), env))
        for sim in sims:
            # Each simulated Spark's own worker (its queue only, one task at a time) and its
            # host agent (live memory and metrics, the memory watchdog).
            sim_hosts.append(sim)
            children.append(Child(f"worker-{sim}", worker_argv(f"host.{sim}", sim, env), env))
            agent = [PY, "manage.py", "hostagent", "--host", sim, "--wait"]
            children.append(Child(f"hostagent-{sim}", agent, env))
        children.append(Child("beat", beat_argv(env), env))
        local = "127.0.0.1" if args.host in {"0.0.0.0", "::"} else args.host
        url = f"http://{local}:{args.port}/"
        wait_until(lambda: _http_ok(url + "healthz"), 60, "the web server", children)
        # Every worker consuming its queue: nothing they print comes after the last lines.
        waited = [PY, "manage.py", "waitworkers", "--timeout", "90"]
        for sim in sims:
            waited += ["--host", sim]
        worker_wait = subprocess.Popen(waited, cwd=ROOT, env=env)
        wait_until(lambda: worker_wait.poll() is not None, 100, "the workers", children)
        if worker_wait.returncode != 0:
            raise SystemExit("[devrun] the workers did not start; see above")
        # The last lines: what was seeded (a new admin's password, shown once), the URL.
        print(seeded.rstrip() + "\n" if seeded.strip() else "", flush=True)
        hint = "" if verbose(env) else "  (quiet: VERBOSE=1 make run shows every INFO line)"
        print(f"[devrun] simulated Sparks: {', '.join(sims)}{hint}", flush=True)
        print(f"[devrun] SparkPanel is running at {url}  (Ctrl-C stops everything)", flush=True)

        while True:
            for child in children:
                if not child.alive():
                    code = child.proc.returncode
                    print(f"[devrun] {child.name} exited with status {code}", flush=True)
                    shutdown()
                    return 1
            time.sleep(0.5)
    except BaseException:
        shutdown()
        raise


def _redacted(url: str) -> str:
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@", 1)
    return url


def _which(name: str) -> str:
    import shutil

    path = shutil.which(name)
    if path is None:
        raise SystemExit(
            f"[devrun] {name} is not installed: run `sudo apt-get install -y redis-server` "
            "or point REDIS_URL at a running Redis"
        )
    return path


def _http_ok(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())
