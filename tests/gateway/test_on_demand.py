"""Models on demand through /v1 (issue 42, first part: the catalog, load on request, one
start shared, replacing an idle on-demand model, idle unload). The real panel and Redis;
the runs' lifecycle is moved by hand where a host's worker would move it (the full flow
with workers and sparksim is the next step, docs/gateway.md)."""

from __future__ import annotations

import concurrent.futures
import time
import uuid

import openai
import pytest

from apps.audit.models import AuditEntry
from apps.core.models import Notice
from apps.gateway import catalog, store
from apps.gateway.models import OnDemand
from apps.hosts.models import Host
from apps.runs.models import Run, RunState
from tests.conftest import ports

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def spark(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    # A name of its own: a load queued for it on the broker reaches no other test's worker.
    return Host.objects.create(name=f"spark-od-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS,
                               simulated=True, sim_time_scale=50, **ports(21000, 21099))  # fmt: skip


def _sdk(panel, key):
    return openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)


def _ready(run: Run) -> None:
    for to in (RunState.STARTING, RunState.WARMING, RunState.READY):
        run.transition(to)


def test_a_request_loads_an_on_demand_model_once_and_says_where_it_stands(
    panel, member, gateway_key, qwen, spark
):
    OnDemand.objects.create(recipe=qwen, idle_timeout_s=600).hosts.add(spark)
    client = _sdk(panel, gateway_key(member))
    name = qwen.public_name
    listed = {m.id: m for m in client.models.list().data}
    assert listed[name].model_extra["sparkpanel"]["state"] == "can_load"
    assert not Run.objects.exists()  # listing loads nothing

    with pytest.raises(openai.InternalServerError) as first:
        client.chat.completions.create(model=name, messages=HI, max_tokens=2)
    assert first.value.status_code == 503
    assert first.value.body["code"] == "model_loading"
    assert f"Loading model {name} on {spark.name}" in first.value.body["message"]
    assert int(first.value.response.headers["retry-after"]) >= 5
    run = Run.objects.get()
    assert (run.recipe_id, run.host_id, run.on_demand, run.started_by) == (qwen.pk, spark.pk,
                                                                           True, None)  # fmt: skip
    # Many requests at once share that start: no second run.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: _code(client, name), range(8)))
    assert codes == ["model_loading"] * 8 and Run.objects.count() == 1
    listed = {m.id: m for m in client.models.list().data}
    assert listed[name].model_extra["sparkpanel"]["state"] == "loading"
    assert AuditEntry.objects.filter(action="run.on_demand_load").count() == 1
    assert Notice.objects.filter(message__contains=f"Loading {name} on {spark.name}").exists()


def _code(client, name):
    try:
        client.chat.completions.create(model=name, messages=HI, max_tokens=2)
    except openai.APIStatusError as exc:
        return exc.body["code"]
    return "ok"


def test_a_load_replaces_the_idle_on_demand_model_but_never_a_pinned_or_busy_one(
    panel, member, operator, gateway_key, qwen, too_long, spark
):
    OnDemand.objects.create(recipe=qwen, priority=5).hosts.add(spark)
    OnDemand.objects.create(recipe=too_long, priority=1).hosts.add(spark)
    other = Run.objects.create(recipe=too_long, host=spark, port=21001, image="x",
                               state=RunState.QUEUED, on_demand=True)  # fmt: skip
    _ready(other)
    client = _sdk(panel, gateway_key(member))
    name = qwen.public_name

    # Used a moment ago: not replaced yet.
    store._sync().set(store.used_key(other.pk), int(time.time()))
    assert _code(client, name) == "model_cannot_load"
    assert catalog.state_of(OnDemand.objects.get(recipe=qwen)).state == "cannot_load"
    # Pinned: never replaced.
    store._sync().set(store.used_key(other.pk), int(time.time()) - 3600)
    Run.objects.filter(pk=other.pk).update(pinned=True)
    with pytest.raises(openai.InternalServerError) as pinned:
        client.chat.completions.create(model=name, messages=HI, max_tokens=2)
    assert "pinned" in pinned.value.body["message"]
    # Idle for an hour and unpinned: stopped, and the load follows on the host's queue.
    Run.objects.filter(pk=other.pk).update(pinned=False)
    assert _code(client, name) == "model_loading"
    other.refresh_from_db()
    assert other.state == RunState.STOPPING
    assert other.stop_reason.startswith(f"replaced by on-demand {name}")
    assert Notice.objects.filter(message__contains="stopping idle").exists()


def test_an_operators_own_run_is_not_replaced_unless_the_catalog_says_so(
    panel, member, gateway_key, qwen, too_long, spark
):
    OnDemand.objects.create(recipe=qwen).hosts.add(spark)
    manual = Run.objects.create(recipe=too_long, host=spark, port=21002, image="x",
                                state=RunState.QUEUED)  # fmt: skip
    _ready(manual)
    store._sync().set(store.used_key(manual.pk), int(time.time()) - 3600)
    client = _sdk(panel, gateway_key(member))
    assert _code(client, qwen.public_name) == "model_cannot_load"
    OnDemand.objects.create(recipe=too_long, may_replace_manual=True)
    assert _code(client, qwen.public_name) == "model_loading"


def test_idle_on_demand_runs_are_stopped_and_listing_does_not_keep_them(
    panel, member, gateway_key, qwen, spark
):
    OnDemand.objects.create(recipe=qwen, idle_timeout_s=60).hosts.add(spark)
    run = Run.objects.create(recipe=qwen, host=spark, port=21003, image="x",
                             state=RunState.QUEUED, on_demand=True)  # fmt: skip
    _ready(run)
    client = _sdk(panel, gateway_key(member))
    store._sync().set(store.used_key(run.pk), int(time.time()) - 30)
    assert catalog.unload_idle() == []  # used 30 s ago, timeout 60 s
    store._sync().set(store.used_key(run.pk), int(time.time()) - 120)
    client.models.list()  # polling the list is no use
    client.models.list()
    assert catalog.unload_idle() == [run.pk]
    run.refresh_from_db()
    assert run.state == RunState.STOPPING and "(on demand)" in run.stop_reason
    # A run an operator started is left alone.
    manual = Run.objects.create(recipe=qwen, host=Host.objects.create(
        name=f"spark-od2-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS, simulated=True, **ports(21100, 21199)),
        port=21100, image="x", state=RunState.QUEUED)  # fmt: skip
    _ready(manual)
    store._sync().set(store.used_key(manual.pk), int(time.time()) - 3600)
    assert catalog.unload_idle() == []


def test_a_served_request_marks_its_run_used(panel, replica, member, gateway_key, qwen):
    _sim, run = replica(qwen)
    OnDemand.objects.create(recipe=qwen)
    before = time.time()
    _sdk(panel, gateway_key(member)).chat.completions.create(
        model=run.served_name, messages=HI, max_tokens=2
    )
    used = store.last_used(run.pk)
    assert used is not None and used >= int(before)
    assert catalog.idle_seconds(run) < 5


# --- requests that ask to wait (X-SparkPanel-Wait) ----------------------------------------


@pytest.fixture
def one_port_spark(settings, tmp_path):
    """A Spark whose port range is one free port: the on-demand run gets it, and a real
    sparksim can be started there as the host's worker would start it."""
    from tests.conftest import free_port

    settings.VAR_DIR = tmp_path
    port = free_port()
    return Host.objects.create(name=f"spark-hold-{uuid.uuid4().hex[:6]}",
                               engine=Host.Engine.PROCESS, simulated=True, sim_time_scale=50,
                               port_min=port, port_max=port)  # fmt: skip


def _serve(run: Run, tmp_path):
    """What the host's worker does for a queued run: its server on its port, then ready."""
    from tests.sparksim.conftest import launch

    sim = launch(tmp_path, "--port", str(run.port), "--gpu-memory-utilization", "0.8",
                 "--max-model-len", "8192", model=run.recipe.model_id, time_scale=20,
                 api_key=run.api_key)  # fmt: skip
    _ready(run)
    return sim


def _await_run(timeout: float = 20) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = Run.objects.filter(on_demand=True).first()
        if run is not None:
            return run
        time.sleep(0.1)
    raise AssertionError("no on-demand run was created")


def test_a_streamed_request_that_waits_is_held_with_progress_and_answered(
    panel, member, gateway_key, qwen, one_port_spark, tmp_path
):
    import threading

    import httpx

    OnDemand.objects.create(recipe=qwen).hosts.add(one_port_spark)
    key = gateway_key(member)
    lines: list[str] = []

    def ask():
        body = {"model": qwen.public_name, "messages": HI, "max_tokens": 5, "stream": True}
        headers = {"Authorization": f"Bearer {key}", "X-SparkPanel-Wait": "120"}
        with httpx.stream("POST", panel.v1 + "/chat/completions", json=body, headers=headers,
                          timeout=120) as response:  # fmt: skip
            lines.append(f"status {response.status_code}")
            for line in response.iter_lines():
                lines.append(line)

    client = threading.Thread(target=ask)
    client.start()
    run = _await_run()
    deadline = time.monotonic() + 20
    while not any(line.startswith(": loading model") for line in lines):
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    assert lines[0] == "status 200"
    sim = _serve(run, tmp_path)
    try:
        client.join(timeout=60)
        assert not client.is_alive()
    finally:
        sim.stop()
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert any('"content"' in line for line in data), lines
    # The comments came first, then the answer: one request, held through the load.
    first_data = lines.index(data[0])
    assert all(line.startswith(":") or not line for line in lines[1:first_data])


def test_a_whole_request_that_waits_gets_its_answer_once_loaded(
    panel, member, gateway_key, qwen, one_port_spark, tmp_path
):
    OnDemand.objects.create(recipe=qwen).hosts.add(one_port_spark)
    client = _sdk(panel, gateway_key(member))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(lambda: client.chat.completions.create(
            model=qwen.public_name, messages=HI, max_tokens=4,
            extra_headers={"X-SparkPanel-Wait": "120"}))  # fmt: skip
        run = _await_run()
        sim = _serve(run, tmp_path)
        try:
            answer = future.result(timeout=60)
        finally:
            sim.stop()
    assert answer.usage.completion_tokens == 4


def test_a_wait_for_a_model_that_cannot_load_is_a_503(
    panel, member, gateway_key, qwen, too_long, spark, settings
):
    OnDemand.objects.create(recipe=qwen).hosts.add(spark)
    pinned = Run.objects.create(recipe=too_long, host=spark, port=21005, image="x",
                                state=RunState.QUEUED, pinned=True)  # fmt: skip
    _ready(pinned)
    client = _sdk(panel, gateway_key(member))
    with pytest.raises(openai.InternalServerError) as refused:
        list(client.chat.completions.create(model=qwen.public_name, messages=HI, max_tokens=2,
                                            stream=True,
                                            extra_headers={"X-SparkPanel-Wait": "60"}))  # fmt: skip
    assert refused.value.body["code"] == "model_cannot_load"
    assert "pinned" in refused.value.body["message"]


def test_requests_held_for_one_load_are_bounded(panel, member, gateway_key, qwen,
                                                one_port_spark, settings):  # fmt: skip
    import threading

    import httpx

    settings.GATEWAY_ONDEMAND_HELD_MAX = 1
    OnDemand.objects.create(recipe=qwen).hosts.add(one_port_spark)
    key = gateway_key(member)
    headers = {"Authorization": f"Bearer {key}", "X-SparkPanel-Wait": "20"}
    body = {"model": qwen.public_name, "messages": HI, "max_tokens": 2, "stream": True}
    seen: list[str] = []

    def first():
        with httpx.stream("POST", panel.v1 + "/chat/completions", json=body, headers=headers,
                          timeout=60) as response:  # fmt: skip
            for line in response.iter_lines():
                seen.append(line)

    holder = threading.Thread(target=first, daemon=True)
    holder.start()
    deadline = time.monotonic() + 20
    while not any(line.startswith(": loading") for line in seen):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    second = httpx.post(panel.v1 + "/chat/completions", json=body, headers=headers, timeout=30)
    assert second.status_code == 429 and second.json()["error"]["code"] == "load_queue_full"
    assert int(second.headers["retry-after"]) > 0
    holder.join(timeout=40)  # the first gives up at its wait, with an error event
    assert any('"code": 503' in line or '"code":503' in line for line in seen), seen


def test_the_models_page_shows_each_on_demand_models_cost(panel, member, operator, gateway_key,
                                                          qwen, too_long, spark):  # fmt: skip
    """Issue 42 §7: the last cold start per Spark (measured), the idle timeout, who used it
    in the last hour, and what loading it would stop."""
    from datetime import timedelta

    from django.test import Client
    from django.utils import timezone

    from apps.gateway.models import UsageRecord

    OnDemand.objects.create(recipe=qwen, idle_timeout_s=1200, priority=3).hosts.add(spark)
    OnDemand.objects.create(recipe=too_long)
    earlier = Run.objects.create(recipe=qwen, host=spark, port=21010, image="x",
                                 state=RunState.STOPPED)  # fmt: skip
    start = timezone.now() - timedelta(hours=3)
    earlier.timings = {"queued": {"start": start.isoformat(), "end": (start + timedelta(
        seconds=20)).isoformat()}, "loading": {"start": (start + timedelta(seconds=20)).isoformat(),
        "end": (start + timedelta(seconds=380)).isoformat()},
        "ready": {"start": (start + timedelta(seconds=380)).isoformat()}}  # fmt: skip
    earlier.save(update_fields=["timings"])
    idle = Run.objects.create(recipe=too_long, host=spark, port=21011, image="x",
                              state=RunState.QUEUED, on_demand=True)  # fmt: skip
    _ready(idle)
    store._sync().set(store.used_key(idle.pk), int(time.time()) - 3600)
    UsageRecord.objects.create(request_id="r1", at=timezone.now() - timedelta(minutes=10),
                               user=member, model=qwen.public_name, endpoint="chat",
                               status=200)  # fmt: skip
    web = Client()
    web.force_login(operator)
    page = web.get("/gateway/").content.decode()
    table = page.split('data-testid="on-demand"')[1].split("</table>")[0]
    row = table.split(f"<code>{qwen.public_name}</code>")[1].split("</tr>")[0]
    assert f"{spark.name}: about 6 min" in row  # 380 s queued to ready
    assert "20 min" in row and ">3<" in row
    assert member.username in row
    assert f"“{too_long}” on {spark.name}" in row  # the idle on-demand run a load would stop


def test_operators_keep_the_catalog_on_the_models_page(operator, member, qwen, spark):
    from django.test import Client

    web = Client()
    web.force_login(member)
    data = {"recipe": qwen.pk, "hosts": [spark.pk], "priority": 2, "idle_minutes": 30,
            "exclusive_group": "", "may_replace_manual": ""}  # fmt: skip
    assert web.post("/gateway/on-demand/", data).status_code == 403
    assert not OnDemand.objects.exists()
    web.force_login(operator)
    page = web.get("/gateway/").content.decode()
    assert 'data-testid="on-demand-form"' in page
    assert web.post("/gateway/on-demand/", data).status_code == 302
    entry = OnDemand.objects.get()
    assert (entry.recipe_id, entry.priority, entry.idle_timeout_s) == (qwen.pk, 2, 1800)
    assert list(entry.hosts.all()) == [spark]
    # Saving the same recipe again changes its entry; nonsense is refused with the reason.
    assert (
        web.post("/gateway/on-demand/", {**data, "idle_minutes": 5, "hosts": []}).status_code == 302
    )
    entry.refresh_from_db()
    assert entry.idle_timeout_s == 300 and not entry.hosts.exists()
    bad = web.post("/gateway/on-demand/", {**data, "idle_minutes": 0})
    assert bad.status_code == 400 and "greater than or equal to 1" in bad.content.decode()
    assert web.post("/gateway/on-demand/", {**data, "recipe": 999999}).status_code == 400
    actions = list(AuditEntry.objects.filter(action="gateway.on_demand")
                   .order_by("pk").values_list("message", flat=True))  # fmt: skip
    assert actions == ["added", "changed"]
    assert web.post(f"/gateway/on-demand/{entry.pk}/delete/").status_code == 302
    assert not OnDemand.objects.exists()
    assert AuditEntry.objects.filter(action="gateway.on_demand", message="removed").exists()
