"""The gateway's limits under abuse (issue 38): black-box, a real uvicorn with the panel's
protocol, real Redis, real sockets; a real sparksim for the token counts and a hostile
HTTP/1.1 server of our own for a model server that misbehaves."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid

import httpx
import pytest

from apps.gateway import store, usage
from apps.gateway.asgi import UNKNOWN_MODEL
from apps.gateway.models import Limit, UsageRecord
from apps.hosts.models import Host
from apps.runs.models import Run, RunState, new_api_key_salt
from tests.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

# A prompt of some thousands of tokens: the prefill a stream left early must still pay for.
LONG = " ".join(f"word{i % 97} sentence {i}." for i in range(900))


def _headers(key: str) -> dict:
    return {"authorization": f"Bearer {key}"}


def _drain_row(**filters) -> UsageRecord:
    deadline = time.monotonic() + 30
    while True:
        usage.drain()
        row = UsageRecord.objects.filter(**filters).order_by("-at").first()
        if row is not None:
            return row
        assert time.monotonic() < deadline, f"no usage row for {filters}"
        time.sleep(0.05)


# --- 1. the prompt of a stream left early is counted -------------------------------------


def test_a_stream_left_after_its_first_token_counts_its_whole_prompt(
    panel, replica, member, gateway_key
):
    _, run = replica(time_scale=1)
    Limit.objects.create(role="member", tokens_per_day=1_000_000)
    key = gateway_key(member)
    messages = [{"role": "user", "content": LONG}]
    # The same request answered whole says how many prompt tokens it is.
    whole = httpx.post(
        panel.v1 + "/chat/completions",
        headers=_headers(key),
        timeout=60,
        json={"model": run.served_name, "messages": messages, "max_tokens": 2},
    )
    assert whole.status_code == 200, whole.text
    prompt_tokens = whole.json()["usage"]["prompt_tokens"]
    assert prompt_tokens > 2500
    usage.drain()
    before = store.tokens_used_today(member.pk)

    body = {"model": run.served_name, "messages": messages, "max_tokens": 3000, "stream": True}
    with httpx.stream("POST", panel.v1 + "/chat/completions", json=body, headers=_headers(key),
                      timeout=60) as response:  # fmt: skip
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {") and any(
                c.get("delta", {}).get("content") for c in json.loads(line[6:])["choices"]
            ):
                break  # the first token: the client leaves

    row = _drain_row(user=member, cancelled=True)
    # Counted as vLLM counts it (its /tokenize, the same messages through the same
    # template), plus the tokens that were sent: not 1 or 2 tokens.
    assert row.prompt_tokens == prompt_tokens
    assert 1 <= row.completion_tokens < 3000
    spent = store.tokens_used_today(member.pk) - before
    assert spent == row.prompt_tokens + row.completion_tokens


def test_a_server_that_cannot_count_the_prompt_leaves_an_estimate(panel, member, gateway_key, qwen):
    """A server that dies mid-answer cannot answer /tokenize: the prompt is estimated from
    its text (3 bytes a token), never 0."""
    upstream = HostileUpstream("die_after_first_event")
    run = _run_on(upstream, qwen)
    key = gateway_key(member)
    messages = [{"role": "user", "content": LONG}]
    body = {"model": run.served_name, "messages": messages, "stream": True}
    with httpx.stream("POST", panel.v1 + "/chat/completions", json=body, headers=_headers(key),
                      timeout=60) as response:  # fmt: skip
        text = response.read().decode()
    assert "upstream_error" in text
    row = _drain_row(user=member)
    assert row.status == 502
    # Every text of the messages (the role's too), 3 bytes a token, rounded up.
    assert row.prompt_tokens == -(-len((LONG + "user").encode()) // 3)
    upstream.stop()


def test_tokenize_and_detokenize_count_against_tokens_per_day(panel, replica, member,
                                                              gateway_key):  # fmt: skip
    _, run = replica()
    Limit.objects.create(role="member", tokens_per_day=1_000_000)
    key = gateway_key(member)
    asked = httpx.post(panel.url + "/tokenize", headers=_headers(key), timeout=30,
                       json={"model": run.served_name, "prompt": LONG})  # fmt: skip
    assert asked.status_code == 200, asked.text
    count = asked.json()["count"]
    back = httpx.post(panel.url + "/detokenize", headers=_headers(key), timeout=30,
                      json={"model": run.served_name, "tokens": asked.json()["tokens"][:100]})  # fmt: skip
    assert back.status_code == 200, back.text
    usage.drain()
    rows = {r.endpoint: r for r in UsageRecord.objects.filter(user=member)}
    assert rows["tokenize"].prompt_tokens == count > 2500
    assert rows["detokenize"].prompt_tokens == 100
    assert store.tokens_used_today(member.pk) == count + 100


def _raw_post(panel, key: str, length: int, sent: bytes) -> tuple[bytes, float]:
    """A POST whose body stops after `sent` (of `length` declared): what came back and when."""
    import socket

    port = int(panel.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: Bearer " + key.encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
                     + sent)  # fmt: skip
        answer = sock.recv(65536)
        return answer, time.monotonic() - started


def test_a_bad_key_or_a_body_over_the_limit_is_refused_before_the_body_comes(
    panel, member, gateway_key, settings
):
    """The body deadline is 60 s: a made-up key that trickles its body must not hold the
    panel that long, nor a body declared over the limit."""
    settings.REQUEST_BODY_TIMEOUT = 60
    answer, took = _raw_post(panel, "spg_" + "x" * 40, 5000, b'{"model": "m", ')
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert took < 10
    revoked = gateway_key(member)
    from apps.gateway.keys import key_revoke
    from apps.gateway.models import GatewayKey

    key_revoke(key=GatewayKey.objects.get(user=member))
    answer, took = _raw_post(panel, revoked, 5000, b'{"model": "m", ')
    assert answer.startswith(b"HTTP/1.1 401") and took < 10, answer[:200]
    answer, took = _raw_post(panel, gateway_key(member), 10**9, b"")
    assert answer.startswith(b"HTTP/1.1 413") and took < 10, answer[:200]


# --- 2. unknown model names --------------------------------------------------------------


def test_unknown_model_names_cost_their_rate_slot_and_share_one_label(
    panel, replica, member, gateway_key, settings
):
    _, run = replica()
    Limit.objects.create(role="member", requests_per_minute=20)
    key = gateway_key(member)
    statuses = []
    with httpx.Client(timeout=30) as http:
        for _ in range(40):
            name = uuid.uuid4().hex * 5  # 160 random characters
            answer = http.post(panel.v1 + "/chat/completions", headers=_headers(key),
                               json={"model": name, "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
            statuses.append(answer.status_code)
        # The known model is refused too now: the minute's requests are spent.
        known = http.post(panel.v1 + "/chat/completions", headers=_headers(key),
                          json={"model": run.served_name, "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert statuses.count(404) == 20, statuses
    assert statuses.count(429) == 20, statuses
    assert known.status_code == 429
    usage.drain()
    rows = UsageRecord.objects.filter(user=member)
    assert rows.count() == 20
    assert set(rows.values_list("model", flat=True)) == {UNKNOWN_MODEL}
    # /metrics: one series per user and model, whatever names were sent.
    settings.METRICS_TOKEN = "t" * 32
    metrics = httpx.get(panel.url + "/metrics", headers=_headers("t" * 32)).text
    series = [line for line in metrics.splitlines()
              if line.startswith("sparkpanel_gateway_requests_total{")]  # fmt: skip
    assert len(series) == 1 and UNKNOWN_MODEL in series[0], series


def test_old_usage_rows_are_summed_and_deleted_and_the_counters_never_go_down(
    member, settings, redis_url
):
    from datetime import timedelta

    from django.utils import timezone

    from apps.overview.panel_metrics import gateway_counters
    from tests.gateway.fixtures import flush_gateway_keys

    flush_gateway_keys(redis_url)  # rows an earlier test queued would be drained in here
    settings.GATEWAY_USAGE_RETENTION_DAYS = 30
    now = timezone.now()
    for i, age in enumerate([40, 35, 31, 29, 1]):
        UsageRecord.objects.create(request_id=f"r{i}", at=now - timedelta(days=age),
                                   user=member, endpoint="chat", model="m", status=200 if i else 500,
                                   prompt_tokens=100, completion_tokens=10)  # fmt: skip

    def counters():
        return {(f.name, tuple(s.labels.values())): s.value
                for f in gateway_counters() for s in f.samples}  # fmt: skip

    before = counters()
    assert usage.prune(now=now, batch=2) == 3
    assert UsageRecord.objects.count() == 2
    assert counters() == before  # the deleted rows live on in the totals
    assert usage.prune(now=now) == 0


# --- 4. a model server that misbehaves ---------------------------------------------------


class HostileUpstream:
    """An HTTP/1.1 server, on a thread, that answers every POST as its mode says. It stops
    by itself after `limit` bytes, and records how many bytes each answer got out before
    its client closed the connection."""

    def __init__(self, mode: str, *, limit: int = 300 << 20, size: int = 0):
        self.mode, self.limit, self.size = mode, limit, size
        self.port = free_port()
        self.sent: list[int] = []  # bytes written per answer, once it ended
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader, writer):
        sent = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                sent = 0
                async for piece in self._answer():
                    writer.write(piece)
                    sent += len(piece)
                    await writer.drain()
                    if sent > self.limit:
                        break
                self.sent.append(sent)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            self.sent.append(sent)
        finally:
            writer.close()

    async def _answer(self):
        chunk_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n" \
                     b"transfer-encoding: chunked\r\n\r\n"  # fmt: skip

        def chunk(data: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(data), data)

        if self.mode == "endless_event":
            yield chunk_head + chunk(b'data: {"choices":[{"delta":{"content":"')
            while True:
                yield chunk(b"a" * 65536)
        elif self.mode == "endless_events":
            yield chunk_head
            event = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,' \
                    b'"delta":{"content":"tok"},"finish_reason":null}]}\n\n'  # fmt: skip
            while True:
                yield chunk(event * 64)
                await asyncio.sleep(0)
        elif self.mode == "die_after_first_event":
            yield chunk_head + chunk(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n')
            raise ConnectionError("the server died")
        elif self.mode == "huge_whole":
            body = b'{"id":"x","object":"chat.completion","pad":"' + b"a" * self.size + b'"}'
            yield (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                % len(body)
            )
            for i in range(0, len(body), 1 << 20):
                yield body[i : i + (1 << 20)]
                await asyncio.sleep(0.01)

    def stop(self):
        async def shut():
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.loop.stop()

        self.loop.call_soon_threadsafe(lambda: self.loop.create_task(shut()))
        self.thread.join(5)


def _run_on(upstream: HostileUpstream, recipe) -> Run:
    """A ready run whose server is `upstream` (the gateway hears of it like any run)."""
    host = Host.objects.create(name=f"bad-{uuid.uuid4().hex[:6]}", engine="process",
                               simulated=True, port_min=upstream.port, port_max=upstream.port)  # fmt: skip
    run = Run.objects.create(recipe=recipe, host=host, port=upstream.port, image="x",
                             state=RunState.STARTING, api_key_salt=new_api_key_salt())  # fmt: skip
    for to in (RunState.WARMING, RunState.READY):
        run.transition(to)
    return run


def _healthz_ms(panel) -> float:
    started = time.monotonic()
    assert httpx.get(panel.url + "/healthz", timeout=30).status_code == 200
    return (time.monotonic() - started) * 1000


def test_an_event_that_never_ends_is_cut_at_its_bound_with_an_error(
    panel, member, gateway_key, qwen, settings, caplog
):
    settings.GATEWAY_EVENT_MAX_BYTES = 8 << 20
    upstream = HostileUpstream("endless_event")
    run = _run_on(upstream, qwen)
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "hi"}],
            "stream": True}  # fmt: skip
    cpu = time.process_time()
    with httpx.stream("POST", panel.v1 + "/chat/completions", json=body,
                      headers=_headers(gateway_key(member)), timeout=60) as response:  # fmt: skip
        text = response.read().decode()
    cpu = time.process_time() - cpu
    assert response.status_code == 200
    error = json.loads(text.split("data: ", 1)[1].split("\n\n")[0])["error"]
    assert error["code"] == "upstream_misbehaved"
    assert "grew past 8388608 bytes" in error["message"]
    assert text.rstrip().endswith("data: [DONE]")
    # The upstream connection was closed soon after the bound (the model stops there).
    deadline = time.monotonic() + 10
    while not upstream.sent and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.sent and upstream.sent[0] < 64 << 20, upstream.sent
    # Linear work: 8 MB passed at a few hundred MB/s, not seconds of CPU (98 s for 200 MB
    # before; this bound is many times the linear cost and a tenth of the quadratic one).
    assert cpu < 5, cpu
    assert any("misbehaved" in r.getMessage() and str(run.pk) in r.getMessage()
               for r in caplog.records)  # fmt: skip
    row = _drain_row(user=member)
    assert row.status == 502 and "misbehaved" in row.error
    upstream.stop()


def test_an_endless_stream_is_ended_when_it_has_more_events_than_tokens_fit(
    panel, member, gateway_key, qwen
):
    qwen.max_model_len = 2048
    qwen.save()
    upstream = HostileUpstream("endless_events")
    run = _run_on(upstream, qwen)
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "hi"}],
            "stream": True}  # fmt: skip
    with httpx.stream("POST", panel.v1 + "/chat/completions", json=body,
                      headers=_headers(gateway_key(member)), timeout=60) as response:  # fmt: skip
        text = response.read().decode()
    tokens = text.count('"content":"tok"')
    assert 2048 <= tokens <= 2048 + 8 + 64, tokens
    errors = [event for event in text.split("\n\n") if event.startswith('data: {"error"')]
    assert len(errors) == 1, text[-2000:]
    error = json.loads(errors[0][6:])["error"]
    assert error["code"] == "upstream_misbehaved" and "more than 2064 events" in error["message"]
    upstream.stop()


def test_large_whole_answers_at_once_stay_within_the_process_budget(
    panel, member, gateway_key, qwen, settings
):
    settings.GATEWAY_BUFFER_MAX_BYTES = 60_000_000
    upstream = HostileUpstream("huge_whole", size=25_000_000)
    run = _run_on(upstream, qwen)
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "hi"}]}
    key = gateway_key(member)

    async def one(client):
        answer = await client.post(panel.v1 + "/chat/completions", json=body,
                                   headers=_headers(key))  # fmt: skip
        return answer.status_code, answer.json()

    async def many(n):
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(one(client) for _ in range(n)))

    answers = asyncio.run(many(4))
    statuses = sorted(status for status, _ in answers)
    # Two answers of 25 MB fit in 60 MB; the others are refused, and say why.
    assert statuses.count(200) >= 1 and statuses.count(503) >= 1, statuses
    for status, payload in answers:
        if status == 503:
            assert payload["error"]["code"] == "panel_busy"
            assert "GATEWAY_BUFFER_MAX_MB" in payload["error"]["message"]
        else:
            assert len(payload["pad"]) == 25_000_000
    # Everything held was given back: one answer after another still fits.
    for _ in range(3):
        assert asyncio.run(many(1))[0][0] == 200
    upstream.stop()


def test_healthz_stays_fast_while_a_server_streams_an_endless_event(
    panel, member, gateway_key, qwen, settings
):
    settings.GATEWAY_EVENT_MAX_BYTES = 48 << 20
    upstream = HostileUpstream("endless_event")
    run = _run_on(upstream, qwen)
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "hi"}],
            "stream": True}  # fmt: skip
    baseline = min(_healthz_ms(panel) for _ in range(3))
    during = []
    done = threading.Event()

    def stream():
        with httpx.stream("POST", panel.v1 + "/chat/completions", json=body,
                          headers=_headers(gateway_key(member)), timeout=60) as response:  # fmt: skip
            response.read()
        done.set()

    thread = threading.Thread(target=stream)
    thread.start()
    while not done.is_set() and len(during) < 20:
        during.append(_healthz_ms(panel))
        time.sleep(0.05)
    thread.join(60)
    assert done.is_set()
    # /healthz shares the process with the relay: it waits at most a few reads' work.
    assert max(during) < max(baseline * 20, 1000), (baseline, during)
    upstream.stop()
