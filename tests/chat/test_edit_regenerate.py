"""Edit and resend a message, regenerate an answer: through the real chat consumer and a
real sparksim (the `/sparksim echo` hook makes each answer predictable)."""

import json

import pytest
from asgiref.sync import async_to_sync

from apps.chat.models import Message
from tests.chat.conftest import ws_headers
from tests.chat.test_relay import _open

pytestmark = pytest.mark.django_db(transaction=True)


def _exchange(conversation, user, *payloads: dict, timeout: float = 30) -> list[list[dict]]:
    """Send each payload on one socket, waiting for its answer's end (or its error)."""

    headers = ws_headers(user)

    async def run():
        communicator = await _open(f"/ws/chat/{conversation.pk}/", headers)
        out = []
        try:
            for payload in payloads:
                await communicator.send_to(text_data=json.dumps(payload))
                events = []
                while True:
                    event = json.loads(await communicator.receive_from(timeout=timeout))
                    events.append(event)
                    if event["type"] in ("done", "error"):
                        break
                out.append(events)
        finally:
            await communicator.disconnect()
        return out

    return async_to_sync(run)()


def _log(conversation) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in conversation.messages.order_by("created_at", "pk")]


def test_editing_a_message_resends_it_and_drops_what_came_after(
    chat_server, conversation_for, member
):
    _sim, run = chat_server()
    conversation = conversation_for(member, run, max_tokens=50)
    first, second = _exchange(
        conversation, member,
        {"type": "send", "content": "/sparksim echo one"},
        {"type": "send", "content": "/sparksim echo two"},
    )  # fmt: skip
    assert _log(conversation) == [
        ("user", "/sparksim echo one"), ("assistant", "one"),
        ("user", "/sparksim echo two"), ("assistant", "two"),
    ]  # fmt: skip
    edited_id = first[0]["user_message"]["id"]
    [edit] = _exchange(conversation, member,
                       {"type": "send", "content": "/sparksim echo uno", "edit": edited_id})  # fmt: skip
    start = edit[0]
    assert start["type"] == "start" and start["replaced_from"] == edited_id
    assert start["user_message"]["content"] == "/sparksim echo uno"
    assert edit[-1]["type"] == "done" and edit[-1]["status"] == "complete"
    # The conversation goes on from the edited message: what followed it is gone.
    assert _log(conversation) == [("user", "/sparksim echo uno"), ("assistant", "uno")]
    assert not Message.objects.filter(pk=second[0]["message"]).exists()


def test_regenerate_replaces_the_last_answer_with_a_new_one_to_the_same_question(
    chat_server, conversation_for, member
):
    _sim, run = chat_server()
    conversation = conversation_for(member, run, max_tokens=50)
    [asked, again] = _exchange(
        conversation, member,
        {"type": "send", "content": "/sparksim echo same question"},
        {"type": "regenerate"},
    )  # fmt: skip
    old_answer = asked[0]["message"]
    start = again[0]
    assert start["type"] == "start" and start["user_message"] is None
    assert start["replaced_from"] == old_answer and start["message"] != old_answer
    assert again[-1]["status"] == "complete"
    assert _log(conversation) == [("user", "/sparksim echo same question"),
                                  ("assistant", "same question")]  # fmt: skip
    assert not Message.objects.filter(pk=old_answer).exists()


def test_bad_edits_and_regenerations_are_refused_and_lose_nothing(
    chat_server, conversation_for, member, operator
):
    _sim, run = chat_server()
    conversation = conversation_for(member, run, max_tokens=50)
    [[nothing_yet]] = _exchange(conversation, member, {"type": "regenerate"})
    assert nothing_yet == {"type": "error", "error": "there is no answer to regenerate"}
    [asked] = _exchange(conversation, member, {"type": "send", "content": "/sparksim echo keep"})
    answer_id = asked[0]["message"]
    elsewhere = conversation_for(operator, run)
    [stranger] = _exchange(elsewhere, operator, {"type": "send", "content": "hi"})
    foreign_id = stranger[0]["user_message"]["id"]
    refused = _exchange(
        conversation, member,
        {"type": "send", "content": "x", "edit": foreign_id},  # another conversation's
        {"type": "send", "content": "x", "edit": answer_id},  # an answer, not a question
        {"type": "send", "content": "x", "edit": "3"},
        {"type": "send", "content": "x", "edit": True},
        {"type": "send", "content": "   ", "edit": asked[0]["user_message"]["id"]},
    )  # fmt: skip
    assert [r[0]["error"] for r in refused] == [
        "that message is not in this conversation",
        "that message is not in this conversation",
        "say which message to edit",
        "say which message to edit",
        "write a message first",
    ]
    assert _log(conversation) == [("user", "/sparksim echo keep"), ("assistant", "keep")]
