"""Browser test harness: a live ASGI server (Django + Channels under uvicorn, real Redis,
its own SQLite file) and Debian's Chromium driven by Playwright.

A failing browser test leaves a screenshot of every open page in var/test-artifacts/.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.conftest import PASSWORD, ROOT, child_env, free_port, manage, stop_process, wait_for

ARTIFACTS = ROOT / "var" / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
USERS = {"mia": "member", "otto": "operator", "ada": "admin"}
# A run on local-sim (the one already active there, or the Qwen preset's, started): its id.
# A model an earlier test stopped may still be giving its memory back (its last meminfo
# lines, fresh for a few seconds, on a busy machine): admission refuses until it has, so
# the start is retried for a while, as an operator would.
READY_RUN = """
import time
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
from apps.runs.services import RunRefused, run_start
host = Host.objects.get(name="local-sim")
run = Run.objects.active().filter(host=host).first()
for attempt in range(120):
    if run is not None:
        break
    recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
    try:
        run = run_start(recipe=recipe, host=host, user=None)
    except RunRefused as exc:
        if exc.code != "not_enough_memory" or attempt == 119:
            raise
        time.sleep(0.5)
print(run.pk)
"""
# local-sim's memory as admission reads it: GB available.
MEMORY_FREE = (
    "from apps.hosts.models import Host; "
    "print(Host.objects.get(name='local-sim').measured_memory()[0].available_bytes / 1e9)"
)
# A run's state, by id.
STATE = "from apps.runs.models import Run; print(Run.objects.get(pk={pk}).state)"


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    log: Path
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))

    def manage(self, *args: str, stdin: str | None = None) -> str:
        return manage(*args, env=self.env, stdin=stdin)


@pytest.fixture(scope="session")
def live_server_asgi(redis_url, tmp_path_factory) -> Iterator[LiveServer]:
    tmp = tmp_path_factory.mktemp("e2e")
    env = child_env(
        DATABASE_URL=f"sqlite:///{tmp / 'e2e.sqlite3'}",
        DEBUG="false",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        CHANNELS_PREFIX=f"e2e-{uuid.uuid4().hex[:8]}",
        SPARKPANEL_VAR_DIR=str(tmp),
    )
    manage("migrate", "--noinput", env=env)
    for username, role in USERS.items():
        manage(
            "createuser",
            username,
            "--role",
            role,
            "--password-stdin",
            env=env,
            stdin=PASSWORD + "\n",
        )
    # The simulated demo host make run creates, sped up for the tests.
    manage("seed_demo", "--admin-username", "demo-admin", env=env)
    manage(
        "shell",
        "-c",
        "from apps.hosts.models import Host; Host.objects.update(sim_time_scale=40)",
        env=env,
    )
    port = free_port()
    log = tmp / "server.log"
    # No proxy in front: forwarding headers believed from no one, as make run without
    # FORWARDED_ALLOW_IPS (tools/devrun.py::proxy_flags).
    argv = [sys.executable, "-m", "uvicorn", "sparkpanel.asgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--no-proxy-headers"]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 60, f"the live server (log: {log})", proc)
        yield LiveServer(url=url, env=env, log=log)
    finally:
        stop_process(proc, timeout=15)
        # Models the tests left running (their servers live in their own sessions).
        from apps.hosts.engines.process import ProcessEngine

        engine = ProcessEngine(runs_dir=tmp / "runs")
        for managed in engine.list_managed():
            engine.kill(managed.handle)


@contextlib.contextmanager
def host_processes(
    server: LiveServer, host: str, *agent_args: str, worker_env: dict | None = None
) -> Iterator[dict]:
    """A simulated host's own Celery worker (its environment plus `worker_env`: what a
    Spark's .env sets) and host agent, on the live server's database (their logs beside
    the server's), until the block ends; yields {"worker", "agent"}."""
    from sparkpanel.celery import app

    logs = server.log.parent
    node = f"{host}@e2e"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "sparkpanel", "worker", "-Q", f"host.{host}",
         "-n", node, "-c", "1", "--prefetch-multiplier", "1", "--without-mingle",
         "--without-gossip"],
        cwd=ROOT, env={**server.env, **(worker_env or {})},
        stdout=(logs / f"{host}-worker.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    agent = subprocess.Popen(
        [sys.executable, "manage.py", "hostagent", "--host", host, *agent_args],
        cwd=ROOT, env=server.env, stdout=(logs / f"{host}-agent.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: bool(app.control.ping(destination=[node], timeout=0.5)), 60,
                 f"{host}'s worker", worker)  # fmt: skip
        yield {"worker": worker, "agent": agent}
    finally:
        stop_process(agent, timeout=10)
        stop_process(worker, timeout=30)


@pytest.fixture(scope="session")
def demo_worker(live_server_asgi):
    """The simulated host's own Celery worker, on the live server's database."""
    from sparkpanel.celery import app

    log = live_server_asgi.log.parent / "worker.log"
    argv = [sys.executable, "-m", "celery", "-A", "sparkpanel", "worker", "-Q", "host.local-sim",
            "-n", "local-sim@e2e", "-c", "1", "--prefetch-multiplier", "1", "-l", "INFO",
            "--without-mingle", "--without-gossip"]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=live_server_asgi.env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    try:
        wait_for(
            lambda: bool(app.control.ping(destination=["local-sim@e2e"], timeout=0.5)),
            60,
            "worker",
            proc,
        )
        yield proc
    finally:
        stop_process(proc, timeout=20)


@pytest.fixture
def ready_run(live_server_asgi, demo_worker):
    """A run of READY_RUN's recipe on the demo host, started by its own worker and ready: its
    primary key (as text, for the pages' URLs)."""
    pk = live_server_asgi.manage("shell", "-c", READY_RUN).strip().splitlines()[-1]
    wait_for(lambda: live_server_asgi.manage("shell", "-c", STATE.format(pk=pk)).split()[-1] == "ready",
             120, f"run {pk} ready")  # fmt: skip
    return pk


@pytest.fixture(scope="package")
def browser(chromium_path):
    # Package scope: Playwright's sync API keeps an event loop running in the main thread,
    # which must not outlive the browser tests.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def new_page(browser, request, live_server_asgi):
    """Open pages in fresh browser contexts (one per user); screenshot them on failure."""
    contexts = []

    def make():
        context = browser.new_context(
            base_url=live_server_asgi.url, viewport={"width": 1280, "height": 800}
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield make
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        for i, context in enumerate(contexts):
            for j, page in enumerate(context.pages):
                page.screenshot(
                    path=str(ARTIFACTS / f"{request.node.name}-{i}-{j}.png"), full_page=True
                )
    for context in contexts:
        context.close()


def pick_host(select, name: str) -> None:
    """Choose a host in a start or queue form by its name: an option also says whether a
    worker consumes the host's queue ("local-sim (simulated) (offline: no worker seen
    yet)": the browser tests run no Celery beat, so no host is ever marked online)."""
    option = select.locator("option").filter(has_text=re.compile(rf"^{re.escape(name)}(\s|$)"))
    select.select_option(value=option.first.get_attribute("value"))


def login(page, username: str, password: str = PASSWORD) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/")


STOP_ACTIVE = """
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="local-sim"):
    run_stop(run=run)
print(Run.objects.active().filter(host__name="local-sim").count())
"""
COUNT_ACTIVE = (
    "from apps.runs.models import Run; "
    "print(Run.objects.active().filter(host__name='local-sim').count())"
)


@pytest.fixture
def idle_demo_host(live_server_asgi, demo_worker):
    """local-sim serving nothing (an earlier test may have left a model running)."""
    live_server_asgi.manage("shell", "-c", STOP_ACTIVE)
    wait_for(
        lambda: live_server_asgi.manage("shell", "-c", COUNT_ACTIVE).split()[-1] == "0",
        60,
        "local-sim idle",
    )
    # ...and its memory given back (a stopped model's last meminfo lines stay fresh for a
    # few seconds): a start right now would be refused for memory, rightly.
    wait_for(
        lambda: float(live_server_asgi.manage("shell", "-c", MEMORY_FREE).split()[-1]) > 100,
        60,
        "local-sim's memory given back",
    )
    return live_server_asgi


# local-sim busy with a pinned stand-in of one recipe (a ready run made directly: no model
# runs), so that a job for another recipe fails at its turn rather than swapping it out;
# such a job (mia's), queued without its task so the test decides when the worker gets it
# (`run_queued_job`); with `finished`, also a job of hers that finished already.
BUSY = """
import json
from django.contrib.auth import get_user_model
from django.utils import timezone
from apps.benchmarks.models import Job, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
host = Host.objects.get(name="local-sim")
busy, other = Recipe.objects.order_by("pk")[:2]
run = Run.objects.create(recipe=busy, host=host, port=host.port_max, image=busy.image, argv=[],
                         state="ready", step="Ready (a stand-in for the test)", pinned=True)
suite = Suite.objects.order_by("-is_default", "pk").first()
mia = get_user_model().objects.get(username="mia")
job = Job.objects.create(suite=suite, recipe=other, host=host, queued_by=mia,
                         plan=suite_plan(suite))
ids = {"run": run.pk, "job": job.pk}
"""
BUSY_FINISHED = """
ids["done"] = Job.objects.create(suite=suite, recipe=busy, host=host, queued_by=mia,
                                 plan=suite_plan(suite), state="done",
                                 finished_at=timezone.now()).pk
"""
RUN_JOB = """
from apps.benchmarks.tasks import run_job
run_job.apply_async(args=[{job}], queue="host.local-sim")
"""
# Nothing left behind: finished jobs would be listed on later tests' Benchmarks pages.
CLEANUP_BUSY = """
from apps.benchmarks.models import Job
from apps.runs.models import Run
Job.objects.filter(pk__in={jobs}).delete()
Run.objects.filter(pk={run}).update(state="stopped", step="Stopped")
Run.objects.filter(pk={run}).delete()
"""


@contextlib.contextmanager
def busy_local_sim(server: LiveServer, *, finished: bool = False) -> Iterator[dict[str, int]]:
    """local-sim as BUSY says, removed afterwards; yields the ids: "run", "job" (queued)
    and, with `finished`, "done"."""
    script = BUSY + (BUSY_FINISHED if finished else "") + "print(json.dumps(ids))"
    ids = json.loads(server.manage("shell", "-c", script).strip().splitlines()[-1])
    try:
        yield ids
    finally:
        jobs = [pk for key, pk in ids.items() if key != "run"]
        server.manage("shell", "-c", CLEANUP_BUSY.format(jobs=jobs, run=ids["run"]))


@pytest.fixture
def busy_demo_host(idle_demo_host):
    """(the server, the ids) of `busy_local_sim`, without the finished job."""
    with busy_local_sim(idle_demo_host) as ids:
        yield idle_demo_host, ids


def run_queued_job(server: LiveServer, job: int) -> None:
    """The host's worker gets the queued job now (it fails at once: the run is pinned)."""
    server.manage("shell", "-c", RUN_JOB.format(job=job))


def live(page) -> None:
    """The page's socket is open and its live elements were fetched."""
    expect(page.locator("#live-status")).to_have_text("live")
