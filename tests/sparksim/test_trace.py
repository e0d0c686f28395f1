"""/sparksim/trace: when sparksim wrote every token-bearing SSE chunk (ground truth for a
load generator's timestamps), against a real sparksim process."""

import json
import time

import httpx

from sparksim.trace import Trace, TraceStore
from tests.sparksim.conftest import NEMOTRON, NEMOTRON_FLAGS

STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


def _stream(sim, path: str, body: dict) -> tuple[str, list[float], list[dict]]:
    """POST a streamed request; the response id, the receive time of every token-bearing
    chunk, and every payload."""
    stamps, payloads, response_id = [], [], None
    with sim.client() as c, c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            now = time.monotonic()
            payload = json.loads(line[6:])
            payloads.append(payload)
            response_id = response_id or payload["id"]
            choice = (payload["choices"] or [{}])[0]
            if (choice.get("delta") or {}).get("content") or choice.get("text"):
                stamps.append(now)
    return response_id, stamps, payloads


def test_a_streamed_chat_has_one_trace_entry_per_token_chunk_written_before_it_arrived(fast_sim):
    body = {"model": NEMOTRON, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 6, "ignore_eos": True, "stream_options": STREAM_OPTIONS}  # fmt: skip
    response_id, received, _ = _stream(fast_sim, "/v1/chat/completions", body)
    assert response_id.startswith("chatcmpl-") and len(received) == 6
    trace = httpx.get(fast_sim.url + "/sparksim/trace", params={"id": response_id}).json()
    assert trace["id"] == response_id
    chunks = trace["chunks"]
    assert [n for _, n in chunks] == [1] * 6  # the role-only chunk is not there
    emitted = [t for t, _ in chunks]
    assert emitted == sorted(emitted)
    assert trace["first_token_at"] == emitted[0] and trace["last_token_at"] == emitted[-1]
    assert trace["started_at"] <= emitted[0]
    # Same machine, same CLOCK_MONOTONIC: written before received, and not long before.
    # sparksim stamps right after its write and this client right after its read: a busy
    # machine that preempts either process between the two moves them apart by a time
    # slice or more (tens of ms; seconds, rarely, for the reader), hence the room.
    for got, sent in zip(received, emitted, strict=True):
        assert -0.05 <= got - sent < 5


def test_completions_are_traced_and_many_ids_come_back_at_once(fast_sim):
    body = {"model": NEMOTRON, "prompt": "The Spark", "max_tokens": 3, "ignore_eos": True}
    first, _, _ = _stream(fast_sim, "/v1/completions", body)
    second, _, _ = _stream(fast_sim, "/v1/completions", body)
    assert first.startswith("cmpl-") and first != second
    reply = httpx.get(
        fast_sim.url + "/sparksim/trace", params={"ids": f"{first},{second},cmpl-nope"}
    ).json()
    assert set(reply["traces"]) == {first, second} and reply["missing"] == ["cmpl-nope"]
    assert all(len(t["chunks"]) == 3 for t in reply["traces"].values())


def test_recent_lists_the_newest_trace_ids_oldest_first(fast_sim):
    """For a client that never sees the response ids (the panel's chat relay hides them)."""
    body = {"model": NEMOTRON, "prompt": "Recent", "max_tokens": 2, "ignore_eos": True}
    ids = [_stream(fast_sim, "/v1/completions", body)[0] for _ in range(3)]
    with fast_sim.client() as c:
        assert c.get("/sparksim/trace", params={"recent": 2}).json() == {"ids": ids[1:]}
        newest = c.get("/sparksim/trace", params={"recent": 1000}).json()["ids"]
        assert newest[-3:] == ids
        for bad in ("0", "1001", "x"):
            reply = c.get("/sparksim/trace", params={"recent": bad})
            assert reply.status_code == 400 and reply.json()["error"]["param"] == "recent"


def test_unknown_unstreamed_and_malformed_queries(fast_sim):
    with fast_sim.client() as c:
        unknown = c.get("/sparksim/trace", params={"id": "chatcmpl-unknown"})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == 404
        whole = c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).json()
        assert c.get("/sparksim/trace", params={"id": whole["id"]}).status_code == 404
        assert c.get("/sparksim/trace").status_code == 400


def test_continuous_usage_counts_the_tokens_streamed_so_far(start_sim):
    """Each chunk's usage.completion_tokens is what this stream has sent, including the
    chunk itself, even when the engine is already ahead (as vLLM's per-output counts): a
    stalled stream (the engine keeps generating meanwhile) must not skip counts."""
    sim = start_sim(*NEMOTRON_FLAGS, "--fault", "stall:1@3", time_scale=20)
    body = {"model": NEMOTRON, "prompt": "The Spark", "max_tokens": 40, "ignore_eos": True,
            "stream_options": STREAM_OPTIONS}  # fmt: skip
    _, _, payloads = _stream(sim, "/v1/completions", body)
    counted = 0
    for payload in payloads:
        choices = payload["choices"]
        if choices and choices[0]["text"]:
            counted += 1
        assert payload["usage"]["completion_tokens"] == counted


def test_the_store_keeps_only_the_newest_traces_within_its_bounds():
    store = TraceStore(limit=3)
    for i in range(5):
        store.add(store.start(f"id-{i}"), i + 1)
    assert len(store) == 3 and store.chunks == 3
    assert store.get("id-0") is None and store.get("id-1") is None
    chunks = store.get("id-4").to_dict("id-4")["chunks"]
    assert len(chunks) == 1 and chunks[0][1] == 5
    assert store.recent(2) == ["id-3", "id-4"] and store.recent(10) == ["id-2", "id-3", "id-4"]
    assert store.recent(0) == []
    empty = Trace().to_dict("x")
    assert empty["chunks"] == [] and empty["first_token_at"] is None
    # A chunk budget bounds the memory whatever the request count.
    store = TraceStore(limit=100, max_chunks=10)
    for i in range(4):
        trace = store.start(f"long-{i}")
        for _ in range(6):
            store.add(trace, 1)
    assert [i for i in range(4) if store.get(f"long-{i}")] == [2, 3] and store.chunks == 12
