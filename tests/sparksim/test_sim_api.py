"""sparksim's OpenAI-compatible API, driven by the official openai client and raw HTTP."""

import json
import threading
import time

import httpx
import openai
import pytest

from tests.sparksim.conftest import NEMOTRON

MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "How many teammates can one Spark serve?"}]  # fmt: skip


@pytest.fixture
def oa(fast_sim):
    return openai.OpenAI(base_url=fast_sim.url + "/v1", api_key="unused", timeout=60, max_retries=0)


def test_models_and_version_report_the_model_and_the_simulated_marker(fast_sim):
    with fast_sim.client() as c:
        models = c.get("/v1/models").json()["data"]
        assert [m["id"] for m in models] == [NEMOTRON] and models[0]["max_model_len"] == 131072
        version = c.get("/version").json()
        assert version["simulated"] is True and version["version"]
        assert c.get("/health").status_code == 200
        assert c.get("/load").json() == {"server_load": 0}


def test_chat_without_streaming_returns_usage_and_length_finish(oa):
    reply = oa.chat.completions.create(
        model=NEMOTRON, messages=MESSAGES, max_tokens=12, extra_body={"ignore_eos": True}
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant" and len(choice.message.content.split()) >= 5
    assert reply.usage.completion_tokens == 12
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 12


def test_streamed_chat_has_a_role_chunk_token_chunks_and_a_final_usage_chunk(oa):
    stream = oa.chat.completions.create(
        model=NEMOTRON, messages=MESSAGES, max_tokens=10, stream=True, seed=7,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant" and not chunks[0].choices[0].delta.content
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) == 10  # one token per chunk
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 10
    # Deterministic: the same seed gives the same text without streaming.
    whole = oa.chat.completions.create(model=NEMOTRON, messages=MESSAGES, max_tokens=10, seed=7,
                                       extra_body={"ignore_eos": True})  # fmt: skip
    assert "".join(texts) == whole.choices[0].message.content


def test_continuous_usage_stats_put_usage_on_every_chunk(fast_sim):
    body = {"model": NEMOTRON, "messages": MESSAGES, "max_tokens": 5, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    with fast_sim.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    payloads = [json.loads(ln[6:]) for ln in lines[:-1]]
    assert all("usage" in p for p in payloads)
    counts = [p["usage"]["completion_tokens"] for p in payloads]
    assert counts == sorted(counts) and counts[-1] == 5


def test_completions_api_and_min_tokens(oa):
    reply = oa.completions.create(
        model=NEMOTRON, prompt="The Spark has", max_tokens=400, extra_body={"min_tokens": 30}
    )
    assert reply.usage.completion_tokens >= 30
    # Without ignore_eos the model stops by itself before max_tokens sometimes, with "stop".
    assert reply.choices[0].finish_reason in {"stop", "length"}


def test_without_ignore_eos_a_long_budget_ends_with_stop(oa):
    reply = oa.chat.completions.create(model=NEMOTRON, messages=MESSAGES, max_tokens=2000, seed=3)
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens < 2000


def test_tokenize_matches_the_prompt_tokens_of_a_request_and_detokenize_inverts_it(fast_sim, oa):
    with fast_sim.client() as c:
        counted = c.post("/tokenize", json={"model": NEMOTRON, "messages": MESSAGES,
                                            "add_generation_prompt": True}).json()  # fmt: skip
        assert counted["max_model_len"] == 131072 and counted["count"] == len(counted["tokens"])
        reply = oa.chat.completions.create(model=NEMOTRON, messages=MESSAGES, max_tokens=1)
        assert reply.usage.prompt_tokens == counted["count"]
        plain = c.post("/tokenize", json={"model": NEMOTRON, "prompt": "naïve café 🚀"}).json()
        back = c.post("/detokenize", json={"model": NEMOTRON, "tokens": plain["tokens"]}).json()
        assert back == {"prompt": "naïve café 🚀"}


def test_errors_look_like_vllms(oa, fast_sim):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        oa.chat.completions.create(model="other/model", messages=MESSAGES, max_tokens=1)
    # As real vLLM answers (tests/conformance compares them): a prompt over the context is
    # refused, one that fills it leaves no room for a token, and a request for more tokens
    # than the context has left is served up to the context's end.
    with pytest.raises(openai.BadRequestError, match="maximum context length is 131072"):
        oa.completions.create(model=NEMOTRON, prompt=[1] * 131073, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="max_tokens must be at least 1, got 0"):
        oa.completions.create(model=NEMOTRON, prompt=[1] * 131072, max_tokens=1)
    clamped = oa.completions.create(
        model=NEMOTRON, prompt=[300] * 131064, max_tokens=100, extra_body={"ignore_eos": True}
    )
    assert (clamped.usage.completion_tokens, clamped.choices[0].finish_reason) == (8, "length")
    with fast_sim.client() as c:
        bad = c.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
        assert c.get("/nope").status_code == 404


def _delta(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_metrics_agree_with_what_was_served(fast_sim, oa):
    before = fast_sim.metrics()
    reply = oa.chat.completions.create(
        model=NEMOTRON, messages=MESSAGES, max_tokens=9, extra_body={"ignore_eos": True}
    )
    after = fast_sim.metrics()
    assert _delta(before, after, "vllm:prompt_tokens_total") == reply.usage.prompt_tokens
    assert _delta(before, after, "vllm:generation_tokens_total") == 9
    assert _delta(before, after, "vllm:request_success_total", finished_reason="length") == 1
    assert _delta(before, after, "vllm:time_to_first_token_seconds_count") == 1
    assert _delta(before, after, "vllm:e2e_request_latency_seconds_count") == 1
    assert _delta(before, after, "vllm:request_generation_tokens_sum") == 9
    assert after[("vllm:num_requests_running", ())] == 0
    assert after[("vllm:kv_cache_usage_perc", ())] == 0
    info = [k for k in after if k[0] == "vllm:cache_config_info"]
    assert info and dict(info[0][1])["gpu_memory_utilization"] == "0.85"


def test_kv_usage_is_blocks_in_use_over_total_while_a_request_runs(fast_sim):
    prompt = list(range(300, 300 + 4000))
    body = {
        "model": NEMOTRON,
        "prompt": prompt,
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
    }
    with fast_sim.client() as c, c.stream("POST", "/v1/completions", json=body) as r:
        lines = r.iter_lines()
        next(ln for ln in lines if ln.startswith("data: {"))
        live = fast_sim.metrics()
        blocks = int(
            dict(next(k for k in live if k[0] == "vllm:cache_config_info")[1])["num_gpu_blocks"]
        )
        assert live[("vllm:num_requests_running", ())] == 1
        used = round(live[("vllm:kv_cache_usage_perc", ())] * blocks)
        # 251 blocks for the prompt and first token, one more per 16 tokens generated since.
        assert 251 <= used <= 251 + 200 // 16 + 1
    time.sleep(0.3)
    assert fast_sim.metrics()[("vllm:num_requests_running", ())] == 0


def test_a_long_prefill_moves_the_kv_cache_and_no_token_counter_as_vllm_does(fast_sim):
    """vLLM V1 counts a prefill from the step that gives the request its first token (its
    engine core emits nothing for a partial prefill: vllm/v1/core/sched/scheduler.py), and
    allocates the prompt's KV blocks chunk by chunk; the guard's hang rule relies on both
    (apps/guard/hang.py). 100,000 tokens in 8,192-token chunks: ~50 simulated seconds."""
    prompt = [7 + i % 20_000 for i in range(100_000)]
    before = fast_sim.metrics()
    done: list[dict] = []

    def ask() -> None:
        with fast_sim.client() as c:
            body = {"model": NEMOTRON, "prompt": prompt, "max_tokens": 1, "cache_salt": "long"}
            done.append(c.post("/v1/completions", json=body).json())

    thread = threading.Thread(target=ask)
    thread.start()
    during = []
    while thread.is_alive():
        sample = fast_sim.metrics()
        if sample[("vllm:num_requests_running", ())] == 1:
            during.append(sample)
        time.sleep(0.05)
    thread.join()
    assert done and done[0]["usage"]["prompt_tokens"] == 100_000
    assert len(during) >= 10
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:iteration_tokens_total_count", "vllm:iteration_tokens_total_sum"):  # fmt: skip
        assert {_delta(before, s, name) for s in during} == {0}, name
    kv = [s[("vllm:kv_cache_usage_perc", ())] for s in during]
    assert kv == sorted(kv) and len(set(kv)) >= 5  # grows chunk by chunk
    after = fast_sim.metrics()
    assert _delta(before, after, "vllm:prompt_tokens_total") == 100_000
    # one step with outputs: the 100,000 prompt tokens it computed and the 1 it generated
    assert _delta(before, after, "vllm:iteration_tokens_total_count") == 1
    assert _delta(before, after, "vllm:iteration_tokens_total_sum") == 100_001


def test_a_client_that_goes_away_aborts_its_request(fast_sim):
    before = fast_sim.metrics()
    body = {
        "model": NEMOTRON,
        "messages": MESSAGES,
        "max_tokens": 3000,
        "ignore_eos": True,
        "stream": True,
    }
    with fast_sim.client() as c, c.stream("POST", "/v1/chat/completions", json=body) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 6:
                break
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = fast_sim.metrics()
        if _delta(before, after, "vllm:request_success_total", finished_reason="abort") == 1:
            break
        time.sleep(0.1)
    assert _delta(before, after, "vllm:request_success_total", finished_reason="abort") == 1
    assert after[("vllm:num_requests_running", ())] == 0


def test_prefix_cache_hits_unless_a_cache_salt_separates_requests(fast_sim):
    prompt = list(range(500, 500 + 3000))
    with fast_sim.client() as c:

        def ttft(**extra):
            t0 = time.monotonic()
            c.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, **extra})
            return time.monotonic() - t0

        before = fast_sim.metrics()
        cold = ttft(cache_salt="a")
        warm = ttft(cache_salt="a")
        salted = ttft(cache_salt="b")
        after = fast_sim.metrics()
    assert warm < cold * 0.6 and salted > warm * 1.5
    assert _delta(before, after, "vllm:prefix_cache_queries_total") == 3 * 3000
    assert _delta(before, after, "vllm:prefix_cache_hits_total") == 2992  # 187 full blocks


def _status(url: str) -> int:
    return httpx.get(url, timeout=2).status_code


def test_the_echo_hook_replies_verbatim_so_tests_can_make_the_model_say_anything(fast_sim):
    hostile = '<script>alert(1)</script> <img src=x onerror="alert(2)">'
    body = {"model": fast_sim.model, "max_tokens": 200,
            "messages": [{"role": "user", "content": "/sparksim echo " + hostile}]}  # fmt: skip
    data = httpx.post(fast_sim.url + "/v1/chat/completions", json=body, timeout=30).json()
    assert data["choices"][0]["message"]["content"] == hostile
    assert data["choices"][0]["finish_reason"] == "stop"
