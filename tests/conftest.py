"""Shared fixtures: personas, real services, and the CI rule that a missing service fails."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import psutil
import pytest
import redis
from django.conf import settings
from django.test import Client

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState, new_api_key_salt
from sparkdomain.presets import RECIPES
from tests.isolation import PORT_SHIFT

# The shared real-vLLM server (real_vllm) and the local Hugging Face hub (hub, serve_hub).
pytest_plugins = ["tests.real_vllm.fixtures", "tests.hubsim.fixtures", "tests.gateway.fixtures"]

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
PASSWORD = "correct-horse-battery-staple-42"
NO_HUB = "http://127.0.0.1:9"


def pytest_configure(config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("SPARKPANEL_TEST_ISOLATED"):
        pytest.exit(
            "parallel workers need their own Redis database and ports: run the suite with "
            "`make test` (or `.venv/bin/python -m pytest -p tests.isolation -n N`)",
            returncode=4,
        )
    # Hundreds of tests create users; the production hasher (PBKDF2, about a second per user
    # on a busy 2-core machine) would cost minutes. Signing in with the real hasher is still
    # tested: the browser tests' live server runs with the production settings.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # No test reaches the real Hugging Face Hub: a host with a cache downloads from here (a
    # closed loopback port: refused at once) unless its test serves hubsim; the panel's
    # subprocesses inherit it. Retries pause briefly (their pacing is not what is tested).
    settings.HF_ENDPOINT = os.environ["HF_ENDPOINT"] = NO_HUB
    settings.WEIGHTS_RETRY_PAUSE_S = 0.05


def ports(low: int, high: int) -> dict[str, int]:
    """A test host's run-port range, `Host(**ports(20000, 20999))`: shifted into this
    test worker's own window (tests/isolation.py), so parallel workers never pick one port."""
    return {"port_min": low + PORT_SHIFT, "port_max": high + PORT_SHIFT}


# Tests that share what tests/isolation.py cannot slice run in one worker, one group
# each, whole modules at a time (tools/test.sh runs the suite with pytest-xdist):
# - "browser": the browser tests (one live server and Chromium per session) and `make run`
#   (both serve a host on the default run ports, 8100 up);
# - "machine": what reads or changes this machine's network interfaces and Docker engine —
#   the Docker engine tests (a host's leftover sweep and a fixture's teardown remove every
#   container labelled with its host name), the real Ray clusters on 127.0.0.2/.3 and the
#   veth pairs of the link checks (another test's interface list would change under them).
# Every other test is a group of its own. A module whose tests need the Docker engine or a
# veth pair must be listed under "machine": collection refuses it otherwise.
XDIST_GROUPS = {
    "browser": ("tests/e2e/", "tests/test_make_run.py"),
    "machine": (
        "tests/hosts/test_docker_engine.py",
        "tests/real_vllm/test_panel_docker.py",
        "tests/runs/test_docker_pull.py",
        "tests/runs/test_image_digest.py",
        "tests/runs/test_mods_docker.py",
        "tests/runs/test_pair_runs.py",
        "tests/sparksim/test_tensor_parallel.py",
        "tests/ray_adapter/test_nodes.py",
        "tests/ray_adapter/test_link.py",
        "tests/deploy/",
    ),
}
MACHINE_FIXTURES = ("docker_url", "veth_link")


def xdist_group(nodeid: str) -> str | None:
    """The group a test runs in (by its module), or None: it can run anywhere."""
    return next((name for name, paths in XDIST_GROUPS.items() if nodeid.startswith(paths)), None)


def distinct_ids(collection) -> list[str]:
    """The node ids with repeats told apart (`id#2`, `id#3`…): schemathesis gives all of a
    test's API operations one node id, and a scheduler that keys work by node id would run
    only the first of them."""
    seen: dict[str, int] = {}
    out = []
    for nodeid in collection:
        seen[nodeid] = seen.get(nodeid, 0) + 1
        out.append(nodeid if seen[nodeid] == 1 else f"{nodeid}#{seen[nodeid]}")
    return out


def pytest_xdist_make_scheduler(config, log):
    """xdist's own `loadgroup` reads `xdist_group` marks through a node id suffix that
    pytest 9 no longer lets it set; this scheduler takes the groups above by path instead
    (groups start first: the largest scopes are sent out first), and runs every item of a
    repeated node id."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def add_node_collection(self, node, collection) -> None:
            super().add_node_collection(node, distinct_ids(collection))

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    stray = sorted({
        item.nodeid.split("::")[0] for item in items
        if any(name in item.fixturenames for name in MACHINE_FIXTURES)
        and xdist_group(item.nodeid) != "machine"
    })  # fmt: skip
    if stray:
        raise pytest.UsageError(
            "these modules use the Docker engine or a veth pair and must be listed in "
            f"tests/conftest.py XDIST_GROUPS['machine']: {', '.join(stray)}"
        )


def require_service(available: bool, what: str) -> None:
    """Skip when a service is missing on a developer's machine; fail under CI=true."""
    if available:
        return
    message = f"{what} is not available"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing service is a failure)", pytrace=False)
    pytest.skip(message + "; `make test` installs and starts it")


def run_async(coro):
    """asyncio.run in a thread of its own: safe whatever loop the calling thread has (the
    browser tests' Playwright keeps one running in the main thread)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def stop_process(proc: subprocess.Popen, timeout: float = 20) -> int:
    """SIGTERM, then SIGKILL if it has not exited within `timeout`; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check: Callable[[], bool], timeout: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process exited with {proc.returncode}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill_worker_tree(proc) -> None:
    """SIGKILL a Celery worker and its pool processes at once — not the model server, which
    lives in its own session and survives, exactly as on a Spark."""
    main = psutil.Process(proc.pid)
    celery = [main] + [
        p for p in main.children(recursive=True) if "celery" in " ".join(p.cmdline())
    ]
    for p in celery:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(celery, timeout=10)
    proc.wait(timeout=10)


def child_env(**overrides: str) -> dict[str, str]:
    """Environment for a subprocess of the panel (manage.py, uvicorn, celery)."""
    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env["REDIS_URL"] = settings.REDIS_URL
    env["PYTHONUNBUFFERED"] = "1"
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture
def api_as():
    """`api_as(user)`: the API as that user, through a fresh token of theirs."""
    from tests.api.conftest import api_client

    return api_client


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1)
    try:
        ok = bool(client.ping())
    except redis.RedisError:
        ok = False
    finally:
        client.close()
    require_service(ok, f"Redis at {settings.REDIS_URL}")
    return settings.REDIS_URL


@pytest.fixture(scope="session")
def docker_url() -> str:
    """The Docker engine `make test` starts (DOCKER_HOST); tests never use another."""
    import docker

    url = os.environ.get("DOCKER_HOST", "")
    ok = False
    if url:
        try:
            client = docker.DockerClient(base_url=url, timeout=10)
            ok = bool(client.ping())
            client.close()
        except docker.errors.DockerException:
            ok = False
    require_service(ok, f"a Docker engine (DOCKER_HOST={url or 'unset'})")
    return url


@pytest.fixture
def docker_sim_host(db, docker_url, settings, tmp_path):
    """A simulated Spark on the Docker engine: sparksim in a container (an empty image
    with read-only mounts of this Python and repo), host networking. Its containers are
    removed after the test."""
    import uuid

    import docker

    from apps.hosts.engines.docker import LABEL_HOST
    from apps.hosts.models import Host

    settings.VAR_DIR = tmp_path
    host = Host.objects.create(
        name=f"dsim-{uuid.uuid4().hex[:6]}", engine=Host.Engine.DOCKER, simulated=True,
        docker_url=docker_url, docker_network=Host.DockerNetwork.HOST, gpus=False,
        sim_time_scale=50, **ports(23000, 23999),
    )  # fmt: skip
    yield host
    client = docker.DockerClient(base_url=docker_url)
    for container in client.containers.list(
        all=True, filters={"label": f"{LABEL_HOST}={host.name}"}
    ):
        container.remove(force=True)
    client.close()


def read_file_in_image(client, image: str, path: str) -> bytes:
    """A file of an image, read from a created (never started) container."""
    import io
    import tarfile

    container = client.containers.create(image, command=["true"])
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(tar.getmembers()[0]).read()
    finally:
        container.remove(force=True)


SHELL_IMAGE = "sparkpanel-test/busybox:1"


@pytest.fixture
def shell_image(docker_url) -> str:
    """An image with a shell on the test Docker engine, made here (no image can be pulled):
    Debian's static busybox (busybox-static, installed by make test) and a few applets,
    working directory /app. Kept per machine."""
    import io
    import tarfile

    import docker

    client = docker.DockerClient(base_url=docker_url)
    try:
        client.images.get(SHELL_IMAGE)
        return SHELL_IMAGE
    except docker.errors.ImageNotFound:
        pass
    busybox = Path("/bin/busybox")
    require_service(busybox.exists(), "Debian's busybox-static (/bin/busybox)")
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(busybox.resolve(), arcname="bin/busybox")
        for applet in ("sh", "cp", "cat", "echo", "mkdir", "ls", "chmod", "sed", "env", "sleep"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        for folder in ("app", "tmp"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
    repo, tag = SHELL_IMAGE.rsplit(":", 1)
    client.api.import_image_from_data(data.getvalue(), repository=repo, tag=tag,
                                      changes=["WORKDIR /app"])  # fmt: skip
    client.close()
    return SHELL_IMAGE


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    require_service(path is not None, "Debian's chromium (/usr/bin/chromium)")
    return path


def _persona(role: Role | None, username: str):
    if role is None:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(username=username, password=PASSWORD)
        return user
    user, _ = user_create(username=username, role=role, password=PASSWORD)
    return user


@pytest.fixture
def admin_user(db):
    return _persona(Role.ADMIN, "ada-admin")


@pytest.fixture
def operator(db):
    return _persona(Role.OPERATOR, "otto-operator")


@pytest.fixture
def member(db):
    return _persona(Role.MEMBER, "mia-member")


@pytest.fixture
def outsider(db):
    """Logged in, but no role: must see nothing."""
    return _persona(None, "olly-outsider")


@pytest.fixture
def client_as() -> Iterator[Callable[..., Client]]:
    def make(user, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(user)
        return client

    yield make


@pytest.fixture
def start_worker(redis_url, tmp_path):
    """Real Celery worker processes in the production shape: prefork, concurrency 1,
    prefetch 1, one queue; stopped (SIGTERM, then kill) after the test."""
    from sparkpanel.celery import app

    procs: list[subprocess.Popen] = []

    def start(queue: str, name: str, *, python: str = sys.executable, **env_overrides: str) -> str:
        node = f"{name}@{socket.gethostname()}"
        log = tmp_path / f"worker-{name}.log"
        env = child_env(
            **{"DATABASE_URL": f"sqlite:///{tmp_path / 'worker.sqlite3'}", **env_overrides}
        )
        argv = [python, "-m", "celery", "-A", "sparkpanel", "worker", "-Q", queue,
                "-n", node, "-c", "1", "--prefetch-multiplier", "1", "-l", "INFO",
                "--without-mingle", "--without-gossip"]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
        )
        procs.append(proc)
        start.processes[node] = proc
        wait_for(
            lambda: bool(app.control.ping(destination=[node], timeout=0.5)),
            60,
            f"worker {node} (log: {log})",
            proc,
        )
        return node

    start.processes = {}
    yield start
    for proc in procs:
        proc.terminate()  # all at once: they shut down in parallel
    for proc in procs:
        stop_process(proc)


# A small real filesystem for disk admission (hf_adapter, runs): a 16 MiB tmpfs.
@pytest.fixture
def small_volume(tmp_path):
    """A 16 MiB tmpfs mounted for the test (root: CAP_SYS_ADMIN)."""
    mount = tmp_path / "volume"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    require_service(done.returncode == 0, f"a tmpfs mount (root, CAP_SYS_ADMIN): {done.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@dataclass
class VethLink:
    """Two ends of a veth pair: a stand-in for a ConnectX link whose state a test sets
    (`ip link set … up/down`); the kernel reports it as it would a real one."""

    near: str
    far: str

    def set(self, end: str, state: str) -> None:
        subprocess.run(["ip", "link", "set", end, state], check=True, capture_output=True)


@pytest.fixture
def veth_link():
    """A veth pair in this machine's network namespace (root), both ends down and without
    addresses; deleted after the test. Nothing is routed through it."""
    ip = shutil.which("ip")
    require_service(bool(ip) and os.geteuid() == 0, "root with iproute2 (`ip`), for a veth pair")
    tag = f"{os.getpid() % 100000}{uuid.uuid4().hex[:3]}"
    link = VethLink(f"spk{tag}a", f"spk{tag}b")  # at most 15 characters
    done = subprocess.run(["ip", "link", "add", link.near, "type", "veth", "peer", "name",
                           link.far], capture_output=True, text=True)  # fmt: skip
    require_service(done.returncode == 0, f"a veth pair ({done.stderr.strip()})")
    try:
        yield link
    finally:
        subprocess.run(["ip", "link", "del", link.near], check=False, capture_output=True)


# --- hosts and recipes shared by the runs and benchmarks tests ----------------------------


@pytest.fixture
def sim_host(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    host = Host.objects.create(
        name=f"sim-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS, simulated=True,
        sim_time_scale=50, **ports(20000, 20999),
    )  # fmt: skip
    yield host
    stop_servers(host)


def stop_servers(host: Host, timeout: float = 5) -> None:
    """No server of the host's outlives its test."""
    engine = engine_for(host)
    for managed in engine.list_managed():
        engine.stop(managed.handle, timeout=timeout)


@pytest.fixture(params=["process", "docker"])
def engine_host(request):
    """The same lifecycle on both engines: a sparksim process, and sparksim in a container
    on the real Docker engine."""
    return request.getfixturevalue("sim_host" if request.param == "process" else "docker_sim_host")


@pytest.fixture
def qwen(db):
    # Built from the preset's data: transactional tests flush the migrated presets away.
    data = next(r for r in RECIPES if r["slug"] == "qwen3-5-35b-max-single-user")
    recipe, _ = Recipe.objects.update_or_create(
        slug="qwen-test",
        defaults={**data, "slug": "qwen-test", "name": "Qwen test", "max_model_len": 8192},
    )
    return recipe


@pytest.fixture
def too_long(db):
    return Recipe.objects.create(
        name="Too long", model_id="nvidia/Llama-3.3-70B-Instruct-FP4", gpu_memory_utilization=Decimal("0.50"),
        max_model_len=262144, max_num_seqs=1, total_params_b=70.6, weight_format="nvfp4", num_layers=80,
        kv_heads=8, head_dim=128,
    )  # fmt: skip


@pytest.fixture
def keyed_sim(tmp_path):
    """`keyed_sim(recipe, *sim_args, time_scale=20, prefix="sim")`: a real sparksim that
    demands its run's own key (as the runner starts it, so every panel client must send
    it), and a ready run of `recipe` on a host of its own, moved through the states the
    runner takes (the gateway hears of it). Returns (sim, run); every sim stops at the end."""
    from tests.sparksim.conftest import launch  # it imports this module

    sims = []

    def start(recipe: Recipe, *args: str, time_scale: float = 20, prefix: str = "sim"):
        salt = new_api_key_salt()
        key = Run(api_key_salt=salt).api_key
        sim = launch(tmp_path, *args, model=recipe.model_id, time_scale=time_scale, api_key=key)
        sims.append(sim)
        port = int(sim.url.rsplit(":", 1)[1])
        host = Host.objects.create(name=f"{prefix}-{uuid.uuid4().hex[:6]}", engine="process",
                                   sim_time_scale=time_scale, simulated=True,
                                   port_min=port, port_max=port)  # fmt: skip
        run = Run.objects.create(recipe=recipe, host=host, port=port, image="x",
                                 state=RunState.STARTING, api_key_salt=salt)  # fmt: skip
        for to in (RunState.WARMING, RunState.READY):
            run.transition(to)
        return sim, run

    yield start
    for sim in sims:
        sim.stop()
