"""The panel's /v1 through the official openai SDK, in front of real sparksim servers that
demand their run's own key (as the runner starts them)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import openai
import psutil
import pytest

from apps.api.tokens import token_create
from apps.gateway import usage
from apps.gateway.models import ModelAlias, UsageRecord
from apps.runs.models import RunState
from tests.api.conftest import Api

pytestmark = pytest.mark.django_db(transaction=True)


def sdk(panel, key: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60, **kwargs)


def test_models_chat_and_completions_streamed_and_not(panel, replica, member, gateway_key):
    sim, run = replica()
    client = sdk(panel, gateway_key(member))
    name = run.served_name

    listed = client.models.list()
    assert [m.id for m in listed.data] == [name]
    assert client.models.retrieve(name).id == name

    whole = client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "Say hi"}], max_tokens=12
    )
    assert whole.choices[0].message.content
    assert whole.model == name
    assert whole.usage.completion_tokens == 12

    chunks = list(client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "Count"}], max_tokens=9, stream=True
    ))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    # The usage chunk the gateway forced upstream is not passed to a client that did not ask.
    assert all(c.usage is None for c in chunks) and all(c.choices for c in chunks)

    asked = list(client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "Count"}], max_tokens=7, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    assert asked[-1].choices == [] and asked[-1].usage.completion_tokens == 7

    completion = client.completions.create(model=name, prompt="Once upon", max_tokens=5)
    assert completion.usage.completion_tokens == 5
    streamed = list(client.completions.create(model=name, prompt="Once", max_tokens=4, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices)

    usage.drain()
    rows = list(UsageRecord.objects.filter(user=member).order_by("at"))
    assert [(r.endpoint, r.completion_tokens, r.status) for r in rows] == [
        ("chat", 12, 200), ("chat", 9, 200), ("chat", 7, 200),
        ("completions", 5, 200), ("completions", 4, 200),
    ]  # fmt: skip
    assert rows[0].prompt_tokens == whole.usage.prompt_tokens
    assert rows[2].prompt_tokens == asked[-1].usage.prompt_tokens
    assert all(r.run_id == run.pk and r.host == run.host.name for r in rows)
    # Streamed answers have a time to first token; whole ones only a duration.
    assert [r.ttft_ms is not None and 0 < r.ttft_ms <= r.duration_ms for r in rows] == [
        False, True, True, False, True]  # fmt: skip
    # The model server counted the same tokens (its own /metrics).
    generated = sum(v for (n, _), v in sim.metrics().items() if n == "vllm:generation_tokens_total")
    assert generated == sum(r.completion_tokens for r in rows)


def test_the_responses_api_passes_through_with_usage_and_limits(panel, replica, member,
                                                               gateway_key):  # fmt: skip
    """Issue 42: vLLM serves OpenAI's Responses API (/v1/responses): the gateway relays it
    with the same key, the public model name in the answer, its usage (input/output tokens)
    settled and recorded, whole and streamed."""
    sim, run = replica()
    client = sdk(panel, gateway_key(member))
    name = run.served_name

    whole = client.responses.create(model=name, input="Say hi", max_output_tokens=6)
    assert whole.output_text and whole.model == name
    assert whole.usage.output_tokens == 6 and whole.usage.input_tokens > 0
    assert whole.status == "incomplete"  # cut by max_output_tokens, as vLLM says

    events = list(client.responses.create(
        model=name, instructions="Be brief.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Count"}]}],
        max_output_tokens=5, stream=True,
    ))  # fmt: skip
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text and done.output_text == text and done.model == name
    assert done.usage.output_tokens == 5

    usage.drain()
    rows = list(UsageRecord.objects.filter(user=member).order_by("at"))
    assert [(r.endpoint, r.completion_tokens, r.status) for r in rows] == [
        ("responses", 6, 200), ("responses", 5, 200)]  # fmt: skip
    assert rows[0].prompt_tokens == whole.usage.input_tokens
    assert rows[1].prompt_tokens == done.usage.input_tokens
    assert rows[0].ttft_ms is None and 0 < rows[1].ttft_ms <= rows[1].duration_ms
    generated = sum(v for (n, _), v in sim.metrics().items() if n == "vllm:generation_tokens_total")
    assert generated == 11


def test_requests_one_after_another_reuse_one_upstream_connection(panel, replica, member,
                                                                  gateway_key):  # fmt: skip
    """The gateway keeps its connection to the model server alive: answers one after another,
    streamed and not, travel on one connection (the panel runs in this process, so its
    sockets are this process's). It once opened a new one per request — a TCP handshake
    and the server's accept on every request's way to its first token."""
    sim, run = replica()
    client = sdk(panel, gateway_key(member))
    port = int(sim.url.rsplit(":", 1)[1])

    def upstream() -> list:
        return [c for c in psutil.Process().net_connections("tcp")
                if c.raddr and c.raddr.port == port]  # fmt: skip

    seen: set[int] = set()
    for i in range(4):
        answer = client.chat.completions.create(
            model=run.served_name, messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
            stream=bool(i % 2),
        )  # fmt: skip
        if i % 2:
            assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
        else:
            assert answer.usage.completion_tokens == 3
        seen |= {c.laddr.port for c in upstream() if c.status == psutil.CONN_ESTABLISHED}
    assert len(seen) == 1, seen
    # Nothing closed on the panel's side (a socket it closed first would wait in TIME_WAIT).
    assert [c.status for c in upstream()] == [psutil.CONN_ESTABLISHED]


def test_tokenize_passes_through(panel, replica, member, gateway_key):
    _, run = replica()
    key = gateway_key(member)
    headers = {"authorization": f"Bearer {key}"}
    body = {"model": run.served_name, "prompt": "hello world"}
    answer = httpx.post(panel.url + "/tokenize", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    tokens = answer.json()["tokens"]
    back = httpx.post(panel.url + "/detokenize", json={"model": run.served_name, "tokens": tokens},
                      headers=headers, timeout=30)  # fmt: skip
    assert back.status_code == 200 and "hello" in back.json()["prompt"]


def test_errors_in_openai_shape(panel, replica, member, gateway_key, too_long):
    _, run = replica()
    name = run.served_name

    with pytest.raises(openai.AuthenticationError) as bad:
        sdk(panel, "spg_not-a-key").models.list()
    assert bad.value.status_code == 401
    assert bad.value.body["code"] == "invalid_api_key"
    response = httpx.get(panel.v1 + "/models", timeout=10)
    assert (
        response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
    )

    # An API token is not a gateway key, and a gateway key is not an API token.
    api_token = token_create(user=member, name="api")[1]
    with pytest.raises(openai.AuthenticationError):
        sdk(panel, api_token).models.list()
    key = gateway_key(member)
    assert Api(key).get("/me").status_code == 401

    client = sdk(panel, key)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert unknown.value.body["code"] == "model_not_found"
    assert name in unknown.value.body["message"]  # it lists what is ready

    # A recipe exists for it but nothing serves it: 503, which recipe, no start under way.
    with pytest.raises(openai.InternalServerError) as idle:
        client.chat.completions.create(
            model=too_long.model_id, messages=[{"role": "user", "content": "x"}]
        )
    assert idle.value.status_code == 503
    assert idle.value.body["code"] == "model_not_running"
    assert too_long.name in idle.value.body["message"]

    limited = sdk(panel, gateway_key(member, models=["something-else"]))
    with pytest.raises(openai.PermissionDeniedError) as denied:
        limited.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}])
    assert denied.value.body["code"] == "model_not_allowed"
    assert limited.models.list().data == []  # it lists only what the key may use
    only = sdk(panel, gateway_key(member, models=[name]))
    assert [m.id for m in only.models.list().data] == [name]

    raw = client.chat.completions.with_raw_response.create(
        model=name, messages=[{"role": "user", "content": "x"}], max_tokens=2
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("application/json")
    assert raw.parse().usage.completion_tokens == 2

    key = gateway_key(member)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    not_json = httpx.post(panel.v1 + "/chat/completions", content=b"{", headers=headers)
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"
    no_model = httpx.post(panel.v1 + "/chat/completions", json={"messages": []}, headers=headers)
    assert no_model.status_code == 400 and no_model.json()["error"]["code"] == "model_missing"
    # The model server's own 400 comes back as it is.
    too_many = httpx.post(panel.v1 + "/chat/completions", headers=headers, json={
        "model": name, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9})  # fmt: skip
    assert too_many.status_code == 400 and "error" in too_many.json()
    assert httpx.get(panel.v1 + "/nothing", headers=headers).status_code == 404
    assert httpx.get(panel.v1 + "/chat/completions", headers=headers).status_code == 405


def test_body_over_the_limit_is_refused_before_any_model(panel, replica, member, gateway_key,
                                                          settings):  # fmt: skip
    _, run = replica()
    settings.GATEWAY_BODY_MAX_BYTES = 10_000
    headers = {"authorization": f"Bearer {gateway_key(member)}"}
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "x" * 20_000}]}
    answer = httpx.post(panel.v1 + "/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
    # A body that stops arriving is answered 408 once REQUEST_BODY_TIMEOUT has passed.
    settings.REQUEST_BODY_TIMEOUT = 1
    host, port = panel.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: " + headers["authorization"].encode() +
                     b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")  # fmt: skip
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "timeout"
    assert 0.9 <= time.monotonic() - started < 30
    usage.drain()
    assert not UsageRecord.objects.exists()


def test_start_under_way_and_alias(panel, replica, member, gateway_key, qwen, sim_host):
    _, run = replica()
    ModelAlias.objects.create(name="team-default", recipe=qwen)
    client = sdk(panel, gateway_key(member))
    assert sorted(m.id for m in client.models.list().data) == sorted([run.served_name,
                                                                      "team-default"])  # fmt: skip
    answer = client.chat.completions.create(
        model="team-default", messages=[{"role": "user", "content": "x"}], max_tokens=3
    )
    assert answer.model == "team-default"  # the name the client asked for
    streamed = list(client.chat.completions.create(
        model="team-default", messages=[{"role": "user", "content": "x"}], max_tokens=3,
        stream=True))  # fmt: skip
    assert {c.model for c in streamed} == {"team-default"}

    run.transition(RunState.STOPPING)
    from apps.runs.models import Run

    starting = Run.objects.create(recipe=qwen, host=sim_host, port=20001, image="x",
                                  state=RunState.QUEUED)  # fmt: skip
    starting.transition(RunState.DOWNLOADING)
    with pytest.raises(openai.InternalServerError) as later:
        client.chat.completions.create(model="team-default",
                                       messages=[{"role": "user", "content": "x"}])  # fmt: skip
    body = later.value.body
    assert body["code"] == "model_not_running"
    assert f"run {starting.pk} on {sim_host.name}" in body["message"]
    assert later.value.response.headers["retry-after"] == "30"


def test_raw_port_refuses_a_client_without_the_runs_key(replica):
    sim, run = replica()
    body = {"model": run.served_name, "messages": [{"role": "user", "content": "x"}]}
    refused = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=10)
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    wrong = httpx.get(sim.url + "/v1/models", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(sim.url + "/v1/models", headers=run.upstream_headers).status_code == 200
    assert httpx.get(sim.url + "/health").status_code == 200  # vLLM guards /v1 only


def test_error_json_is_valid_for_every_refusal():
    from apps.gateway.asgi import error_body

    assert json.loads(error_body("m", "t", "c")) == {
        "error": {"message": "m", "type": "t", "param": None, "code": "c"}
    }
