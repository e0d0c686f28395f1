"""Chat answers are counted like everything else: the real chat WebSocket consumer against
sparksim, with the panel's gateway serving API keys beside it (real Redis). A user's chat
and API use share one set of limits, chat refusals read as the gateway's, and chat answers
are usage rows queued in Redis like the gateway's (apps/gateway/chat_budget.py)."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from apps.chat.models import Conversation, Message
from apps.gateway import chat_budget, store, usage
from apps.gateway.models import Limit, UsageRecord
from sparkpanel.asgi import application
from tests.chat.conftest import ws_headers
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


def _conversation(user, run, **fields) -> Conversation:
    return Conversation.objects.create(user=user, run=run, recipe=run.recipe, **fields)


async def _open(conversation, headers) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers)
    connected, code = await communicator.connect(timeout=10)
    assert connected, code
    return communicator


async def _send(communicator, content: str) -> None:
    await communicator.send_to(text_data=json.dumps({"type": "send", "content": content}))


async def _until(communicator, kinds: tuple[str, ...], timeout: float = 30) -> dict:
    while True:
        event = json.loads(await communicator.receive_from(timeout=timeout))
        if event["type"] in kinds:
            return event


def _chat(conversation, user, content: str = "Hi") -> dict:
    """One question, its answer to the end: the "done" event (or an "error" one)."""
    headers = ws_headers(user)

    async def go():
        communicator = await _open(conversation, headers)
        try:
            await _send(communicator, content)
            return await _until(communicator, ("done", "error"))
        finally:
            await communicator.disconnect()

    return async_to_sync(go)()


def _served(sim) -> float:
    """Requests the model server has seen (finished, running or waiting)."""
    names = ("vllm:request_success_total", "vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(v for (name, _), v in sim.metrics().items() if name in names)


def _api(panel, key: str):
    return openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)


def test_requests_per_minute_count_chat_answers_and_api_requests_together(
    panel, replica, member, gateway_key
):
    sim, run = replica()
    Limit.objects.create(user=member, requests_per_minute=2)
    conversation = _conversation(member, run, max_tokens=8)
    assert _chat(conversation, member)["status"] == "complete"
    client = _api(panel, gateway_key(member))
    assert client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=2)
    assert _served(sim) == 2

    done = _chat(conversation, member)  # the third request of the minute
    assert done["type"] == "done" and done["status"] == "error"
    assert re.fullmatch(
        r"Over your limit of 2 requests per minute; retry in \d+ s\.", done["error"]
    )
    saved = Message.objects.get(pk=done["message"])
    assert (saved.status, saved.error, saved.content) == (Message.Status.ERROR, done["error"], "")
    assert _served(sim) == 2  # nothing was sent to the model
    # The API says the same, in the same words, for the same minute.
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=2)
    assert refused.value.body["code"] == "requests_per_minute"
    assert refused.value.body["message"].split(";")[0] == done["error"].split(";")[0]
    usage.drain()
    assert sorted(UsageRecord.objects.values_list("source", flat=True)) == ["chat", "gateway"]


def test_one_concurrent_stream_is_shared_by_the_api_and_the_chat(
    panel, replica, member, gateway_key, settings
):
    settings.CHAT_STALL_TIMEOUT_S = 60
    sim, run = replica(None, "stall:120@3", time_scale=1)  # every answer stops after 3 tokens
    Limit.objects.create(user=member, concurrent_streams=1)
    key = gateway_key(member)
    conversation = _conversation(member, run, max_tokens=200)
    headers = ws_headers(member)
    api_headers = {"authorization": f"Bearer {key}"}
    body = {"model": run.served_name, "messages": HI, "max_tokens": 200, "stream": True}
    in_flight = lambda: store.in_flight(member.pk)  # noqa: E731

    async def scenario():
        async with httpx.AsyncClient(base_url=panel.v1, headers=api_headers, timeout=30) as http:
            # An API stream in flight: the chat is refused, and sends nothing upstream.
            async with http.stream("POST", "/chat/completions", json=body) as response:
                assert response.status_code == 200
                lines = response.aiter_lines()  # held: a dropped iterator closes the stream
                async for line in lines:
                    if line.startswith("data: {"):
                        break
                chat = await _open(conversation, headers)
                await _send(chat, "Hi")
                refused = await _until(chat, ("done", "error"))
                served = await asyncio.to_thread(_served, sim)
            # The stream is closed: the slot is free again.
            await asyncio.to_thread(wait_for, lambda: in_flight() == 0, 30, "the API's slot")
            # A chat answer in flight: the API is refused.
            await _send(chat, "Hi")
            await _until(chat, ("delta",))
            answer = await http.post("/chat/completions", json={**body, "stream": False})
            await chat.send_to(text_data=json.dumps({"type": "stop"}))
            stopped = await _until(chat, ("done", "error"))
            await chat.disconnect()
            return refused, served, answer, stopped

    refused, served, answer, stopped = async_to_sync(scenario)()
    assert refused["type"] == "done" and refused["status"] == "error"
    assert refused["error"] == "Over your limit of 1 requests at once; wait for one to finish."
    assert served == 1  # only the API's stream
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "concurrent_requests"
    assert stopped["status"] == "stopped"
    assert in_flight() == 0  # the stopped answer freed its slot
    usage.drain()
    chat_row = UsageRecord.objects.get(source=UsageRecord.Source.CHAT)
    assert (chat_row.status, chat_row.cancelled) == (499, True)
    # No final usage chunk for a stopped answer: the running usage of its last chunk (the
    # stream stalled at its third token).
    assert 1 <= chat_row.completion_tokens <= 3
    # Its prompt was prefilled all the same: counted as the server counts it, like the
    # API's stream that was left early above (the same message: /tokenize).
    api_row = UsageRecord.objects.get(source=UsageRecord.Source.GATEWAY, status=499)
    assert api_row.cancelled

    def tokenized(messages):
        return httpx.post(run.local_endpoint + "/tokenize", headers=run.upstream_headers,
                          json={"model": run.served_name, "messages": messages}).json()["count"]  # fmt: skip

    assert api_row.prompt_tokens == tokenized(HI) > 0
    asked = [{"role": m.role, "content": m.content}
             for m in conversation.messages.order_by("pk") if m.content][:-1]  # fmt: skip
    assert chat_row.prompt_tokens == tokenized(asked) > api_row.prompt_tokens


def test_a_token_budget_caps_a_chat_answer_then_refuses_the_next(
    panel, replica, member, monkeypatch
):
    sim, run = replica()
    bounds: list[int] = []
    admit = chat_budget.admit

    async def spy(user_id, model, prompt_bound, max_tokens):
        bounds.append(prompt_bound)
        return await admit(user_id, model, prompt_bound, max_tokens)

    monkeypatch.setattr(chat_budget, "admit", spy)
    conversation = _conversation(member, run, max_tokens=1000, temperature=0.5)
    # Room for the prompt's bound (the request body's size) and 10 tokens of answer: less
    # than any answer sparksim gives on its own (24 tokens or more).
    bound = len(json.dumps({
        "model": run.served_name, "messages": HI, "max_tokens": 1000, "temperature": 0.5,
        "top_p": 1.0, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }))  # fmt: skip
    limit = bound + 10
    Limit.objects.create(user=member, tokens_per_day=limit)

    done = _chat(conversation, member)
    left = limit - bounds[0]
    assert 1 <= left < 24, (bound, bounds)  # the estimate above is the consumer's bound
    assert done["status"] == "complete"
    saved = Message.objects.get(pk=done["message"])
    assert (saved.finish_reason, saved.completion_tokens) == ("length", left)
    # The reservation became what the server counted, on the counter the API uses too.
    spent = saved.prompt_tokens + saved.completion_tokens
    assert store.tokens_used_today(member.pk) == spent

    done = _chat(conversation, member, "And then?")  # a longer history: no room left
    assert done["status"] == "error"
    assert done["error"].startswith(f"Today's {limit} tokens are used (prompt + answer); ")
    assert _served(sim) == 1
    assert store.tokens_used_today(member.pk) == spent  # a refusal reserves nothing


def test_chat_answers_are_usage_rows_with_their_user_run_and_tokens(
    panel, replica, member, gateway_key
):
    _sim, run = replica()
    Limit.objects.create(user=member, tokens_per_day=1_000_000)
    conversation = _conversation(member, run, max_tokens=40)
    first, second = _chat(conversation, member), _chat(conversation, member, "More?")
    _api(panel, gateway_key(member)).chat.completions.create(
        model=run.served_name, messages=HI, max_tokens=3
    )
    assert not UsageRecord.objects.exists()  # queued in Redis, like the gateway's rows
    assert usage.drain() == 3
    chat_rows = UsageRecord.objects.filter(source=UsageRecord.Source.CHAT).order_by("at")
    assert len(chat_rows) == 2
    for done, row in zip((first, second), chat_rows, strict=True):
        saved = Message.objects.get(pk=done["message"])
        assert (row.user, row.run, row.key, row.endpoint) == (member, run, None, "chat")
        assert (row.model, row.host, row.status, row.cancelled) == (
            run.served_name, run.host.name, 200, False)  # fmt: skip
        assert (row.prompt_tokens, row.completion_tokens) == (
            saved.prompt_tokens, saved.completion_tokens)  # fmt: skip
        assert row.prompt_tokens > 0 and row.completion_tokens > 0
        assert 0 < row.ttft_ms < row.duration_ms
    api_row = UsageRecord.objects.get(source=UsageRecord.Source.GATEWAY)
    assert api_row.key is not None and api_row.completion_tokens == 3
    total = sum(r.total_tokens for r in UsageRecord.objects.all())
    assert store.tokens_used_today(member.pk) == total  # every reservation was settled
    assert store.in_flight(member.pk) == 0


def test_without_redis_the_chat_says_so_and_sends_nothing(replica, member, settings):
    sim, run = replica()
    conversation = _conversation(member, run, max_tokens=8)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # where the gateway's counters are: nobody
    done = _chat(conversation, member)
    assert done["status"] == "error" and done["error"] == chat_budget.REDIS_DOWN
    assert _served(sim) == 0
    # Settling in that state is logged, not raised.
    ticket = chat_budget.ChatTicket(member.pk, "x", 0, 0, None)
    async_to_sync(chat_budget.settle)(
        ticket, run_id=run.pk, host="h", model="m", prompt_tokens=1, completion_tokens=1,
        ttft_s=None, duration_s=0.1, status=200, cancelled=False, error="",
    )  # fmt: skip
