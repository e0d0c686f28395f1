"""A stopped answer is one usage row, cancelled — not failed — with the prompt tokens the
model server processed and the tokens it streamed before the stop (issue 43): the chat's
Stop over a real WebSocket to the panel's server, and a /v1 client (the OpenAI SDK) that
closes its stream, each against a real sparksim process that generates until aborted."""

from __future__ import annotations

import csv
import io
import json
import time

import httpx
import openai
import pytest
from django.test import Client
from websockets.sync.client import connect

from apps.chat.models import Conversation, Message
from apps.gateway import usage
from apps.gateway.models import UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)
QUESTION = "Write a long essay about the history of the transistor."
MAX_TOKENS = 4000  # at a real Spark's pace (time_scale 1) a minute of answer: stopped long before


def _tokenized(run, messages: list[dict]) -> int:
    """The prompt's tokens as the model server counts them."""
    answer = httpx.post(run.local_endpoint + "/tokenize", headers=run.upstream_headers,
                        json={"model": run.served_name, "messages": messages}, timeout=10)  # fmt: skip
    return answer.json()["count"]


def _only_row(user) -> UsageRecord:
    """The user's one usage row, once it is queued and drained (and still one a moment later)."""
    deadline = time.monotonic() + 30
    while usage.drain() == 0 and not UsageRecord.objects.filter(user=user).exists():
        assert time.monotonic() < deadline, "no usage row for the stopped answer"
        time.sleep(0.05)
    time.sleep(0.5)
    usage.drain()
    rows = list(UsageRecord.objects.filter(user=user))
    assert len(rows) == 1, [(r.source, r.status, r.cancelled) for r in rows]
    return rows[0]


def _counted_cancelled_not_failed(user) -> None:
    """What the Usage page, its CSV and the sums behind the API and /metrics say."""
    page = Client()
    page.force_login(user)
    html = page.get("/usage/").content.decode()
    assert "<strong>1</strong> requests" in html
    assert "0 failed · 1 cancelled" in html
    exported = page.get("/usage.csv?days=1").content.decode()
    rows = list(csv.DictReader(io.StringIO(exported)))
    assert [(r["status"], r["cancelled"], r["error"]) for r in rows] == [("499", "1", "")]
    totals = UsageRecord.objects.filter(user=user).aggregate(**usage.TOTALS)
    assert (totals["requests"], totals["errors"], totals["cancelled"]) == (1, 0, 1)


def test_the_chats_stop_is_one_cancelled_row_with_its_prompt_and_streamed_tokens(
    panel, replica, member
):
    _, run = replica(time_scale=1)
    conversation = Conversation.objects.create(
        user=member, run=run, recipe=run.recipe, max_tokens=MAX_TOKENS
    )
    session = Client()
    session.force_login(member)
    socket = connect(
        panel.url.replace("http://", "ws://") + f"/ws/chat/{conversation.pk}/",
        origin=panel.url,
        additional_headers={"Cookie": f"sessionid={session.cookies['sessionid'].value}"},
        open_timeout=15,
        close_timeout=5,
    )
    with socket:
        socket.send(json.dumps({"type": "send", "content": QUESTION}))
        deltas = 0
        while deltas < 3:  # the answer streams in; then Stop, as the page's button sends it
            event = json.loads(socket.recv(timeout=30))
            assert event["type"] in ("start", "delta"), event
            deltas += event["type"] == "delta"
        socket.send(json.dumps({"type": "stop"}))
        while (event := json.loads(socket.recv(timeout=30)))["type"] != "done":
            pass
    assert event["status"] == "stopped"
    saved = Message.objects.get(pk=event["message"])
    assert saved.status == Message.Status.STOPPED and saved.content

    row = _only_row(member)
    assert (row.source, row.run, row.status, row.cancelled) == ("chat", run, 499, True)
    # The prompt was processed: counted as the server counts it, never 0.
    assert row.prompt_tokens == _tokenized(run, [{"role": "user", "content": QUESTION}]) > 0
    # The tokens generated before the stop, as the server counted them (each delta the page
    # got carried at least one), the same the answer shows under it.
    assert deltas <= row.completion_tokens < MAX_TOKENS
    assert (saved.prompt_tokens, saved.completion_tokens) == (
        row.prompt_tokens, row.completion_tokens)  # fmt: skip
    _counted_cancelled_not_failed(member)


def test_a_v1_client_that_closes_its_stream_is_one_cancelled_row_with_its_prompt(
    panel, replica, member, gateway_key
):
    _, run = replica(time_scale=1)
    client = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0,
                           timeout=60)  # fmt: skip
    messages = [{"role": "user", "content": QUESTION}]
    stream = client.chat.completions.create(
        model=run.served_name, messages=messages, max_tokens=MAX_TOKENS, stream=True
    )
    received = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
            if received == 3:
                break
    stream.close()  # the SDK closes the connection: the panel aborts the upstream request

    row = _only_row(member)
    assert (row.source, row.endpoint, row.status, row.cancelled) == ("gateway", "chat", 499, True)
    assert row.prompt_tokens == _tokenized(run, messages) > 0
    assert received <= row.completion_tokens < MAX_TOKENS
    _counted_cancelled_not_failed(member)
