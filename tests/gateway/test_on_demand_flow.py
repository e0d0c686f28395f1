"""Models on demand end to end (issue #42, "Done when"): two simulated Sparks, each with its
own real Celery worker starting sparksim servers; three on-demand models, two of which fit
together on one Spark; the openai SDK and a held stream ask for them in turn and at once.
The panel loads, co-locates and evicts — and the hosts' meminfo files, read all along,
never break the memory rules."""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from decimal import Decimal

import openai
import pytest
from django.db import connection

from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from sparkdomain.meminfo import MeminfoError, read_meminfo
from sparkdomain.spark import GB, GIB
from tests.conftest import stop_servers, wait_for
from tests.isolation import PORT_SHIFT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]
HI = [{"role": "user", "content": "Hi"}]


def _recipe(qwen: Recipe, name: str, utilization: str) -> Recipe:
    skip = ("id", "slug", "name", "created_at", "updated_at", "served_model_name")
    data = {f.name: getattr(qwen, f.name) for f in Recipe._meta.concrete_fields
            if f.name not in skip}  # fmt: skip
    data["gpu_memory_utilization"] = Decimal(utilization)
    return Recipe.objects.create(**data, slug=name, name=name, served_model_name=name)


class MemoryWatch(threading.Thread):
    """Reads each host's meminfo ten times a second: the lowest MemAvailable seen."""

    def __init__(self, hosts: list[Host]):
        super().__init__(daemon=True)
        self.paths = {h.name: h.meminfo_file() for h in hosts}
        self.lowest = dict.fromkeys(self.paths)
        self.readings = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            for name, path in self.paths.items():
                try:
                    available = read_meminfo(path).available_bytes
                except (OSError, MeminfoError):
                    continue  # no server has written it yet: an idle Spark
                self.readings += 1
                low = self.lowest[name]
                self.lowest[name] = available if low is None else min(low, available)


def _code(fn):
    try:
        fn()
    except openai.APIStatusError as exc:
        return exc.status_code, exc.body["code"], exc.body["message"], exc.response.headers
    return 200, "ok", "", {}


@pytest.fixture
def sparks():
    """The test's Sparks, and no server of theirs outlives it."""
    made: list[Host] = []
    yield made
    for host in made:
        stop_servers(host)


@pytest.mark.timeout(420)
def test_models_load_on_demand_share_a_spark_and_evict_the_idle_one(
    start_worker,
    panel,
    member,
    operator,
    gateway_key,
    qwen,
    tmp_path,
    settings,
    monkeypatch,
    sparks,
):
    settings.VAR_DIR = tmp_path
    # The workers share the panel's database, files and secret (a run's server key is
    # derived from it).
    shared = {"DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
              "SPARKPANEL_VAR_DIR": str(tmp_path), "SECRET_KEY": settings.SECRET_KEY}  # fmt: skip
    tag = uuid.uuid4().hex[:4]
    two, one = (
        Host.objects.create(
            name=f"od{i}-{tag}",
            engine=Host.Engine.PROCESS,
            simulated=True,
            sim_time_scale=40,
            max_runs=runs,
            port_min=22000 + PORT_SHIFT + 100 * i,
            port_max=22099 + PORT_SHIFT + 100 * i,
        )
        for i, runs in ((0, 2), (1, 1))
    )
    sparks.extend((two, one))
    for host in (two, one):
        start_worker(host.queue, host.name, **shared)
    a, b, c = (_recipe(qwen, f"od-{x}-{tag}", u) for x, u in (("a", "0.30"), ("b", "0.30"),
                                                             ("c", "0.55")))  # fmt: skip
    for recipe, priority, hosts in ((a, 0, [two]), (b, 1, [two]), (c, 1, [two, one])):
        OnDemand.objects.create(recipe=recipe, priority=priority).hosts.add(*hosts)
    # The other Spark serves an operator's own run: no load may replace it.
    manual = run_start(recipe=qwen, host=one, user=operator)
    wait_for(lambda: Run.objects.get(pk=manual.pk).state == RunState.READY, 120, "manual run")
    watch = MemoryWatch([two, one])
    watch.start()
    sdk = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0,
                        timeout=180)  # fmt: skip

    def ask(recipe, **kwargs):
        return sdk.chat.completions.create(model=recipe.public_name, messages=HI, max_tokens=4,
                                           **kwargs)  # fmt: skip

    # 1. A, not loaded: a whole request is a 503 with Retry-After and where the load stands.
    status, code, message, headers = _code(lambda: ask(a))
    assert (status, code) == (503, "model_loading"), message
    assert f"on {two.name}" in message and int(headers["retry-after"]) >= 5
    # A streamed request that can wait is held through the load and answered.
    with sdk.chat.completions.create(model=a.public_name, messages=HI, max_tokens=4, stream=True,
                                     extra_headers={"X-SparkPanel-Wait": "240"}) as stream:  # fmt: skip
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text
    run_a = Run.objects.get(recipe=a, state=RunState.READY)

    # 2. B and C at once: B loads beside A (0.60 in all); C cannot load now — B is starting
    # on the first Spark, and the other runs an operator's own model.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        held_b = pool.submit(ask, b, extra_headers={"X-SparkPanel-Wait": "240"})
        time.sleep(1.0)
        status, code, message, _ = _code(lambda: ask(c))
        answer_b = held_b.result(timeout=300)
    assert answer_b.usage.completion_tokens == 4
    assert (status, code) == (503, "model_cannot_load"), message
    assert "started by an operator" in message
    run_b = Run.objects.get(recipe=b, state=RunState.READY)
    assert (run_a.host_id, run_b.host_id, {run_a.slot, run_b.slot}) == (two.pk, two.pk, {0, 1})

    # 3. Listing the models does not keep a model in use: A's idle time keeps growing.
    idle = catalog.idle_seconds(run_a)
    for _ in range(5):
        listed = {m.id: m.model_extra.get("sparkpanel", {}) for m in sdk.models.list().data}
        time.sleep(0.2)
    assert listed[c.public_name]["state"] in ("can_load", "cannot_load")
    assert catalog.idle_seconds(run_a) > idle + 0.9

    # 4. C (0.55) beside A and B would be 1.15 of the Spark: once they have been idle (the
    # minimum shortened for the test) the lower-priority A is stopped and C loads beside B.
    monkeypatch.setattr(catalog, "MIN_IDLE_TO_REPLACE_S", 1)
    time.sleep(1.5)
    answer_c = ask(c, extra_headers={"X-SparkPanel-Wait": "240"})
    assert answer_c.usage.completion_tokens == 4
    run_a.refresh_from_db()
    assert run_a.state == RunState.STOPPED and run_a.stop_reason.startswith("replaced by on-demand")
    run_c = Run.objects.get(recipe=c, state=RunState.READY)
    # Only A made room: B, asked for by nobody meanwhile, still serves beside C.
    assert run_c.host_id == two.pk and Run.objects.get(pk=run_b.pk).state == RunState.READY
    assert Run.objects.get(pk=manual.pk).state == RunState.READY

    # Never over the memory rules: MemAvailable stayed above the freeze margin on both
    # Sparks, and the pools on the first never held more than 0.90 of it.
    watch.done.set()
    watch.join(timeout=5)
    assert watch.readings > 50
    for host in (two, one):
        spec = host.spec()
        assert watch.lowest[host.name] is not None
        assert watch.lowest[host.name] > spec.freeze_margin_gb * GB, watch.lowest
    used_most = two.physical_memory_gb * GB - watch.lowest[two.name]
    pools = float(b.gpu_memory_utilization + c.gpu_memory_utilization) * two.cuda_visible_gib * GIB
    assert used_most >= pools  # the meminfo really showed both pools at once
    assert used_most <= 0.90 * two.cuda_visible_gib * GIB + two.os_reserve_gb * GB + 4 * GB
