"""The conversation page follows its run (issue #43, point 4): the line about the run is a
live element, pushed on every state change of the run, with why Send is off once it is
not ready; and the message form posts (never a GET with the message in its URL) to an
address that gives the message back in its box. Real Redis, real Channels layer. The
browser side is tests/e2e/test_chat_live.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.chat.models import Conversation, Message
from apps.runs.models import Run, RunState
from tests.livepush import pushes as _pushes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


@pytest.fixture
def ready_run(sim_host, qwen) -> Run:
    return Run.objects.create(recipe=qwen, host=sim_host, port=20601, image=qwen.image, argv=[],
                              state=RunState.READY, step="Ready")  # fmt: skip


def test_the_page_shows_its_run_as_a_live_element_pushed_when_the_run_stops(
    client_as, member, ready_run
):
    conversation = Conversation.objects.create(user=member, run=ready_run, recipe=ready_run.recipe)
    client = client_as(member)
    page = client.get(conversation.get_absolute_url()).content.decode()
    src = reverse("live-element", args=["chat-run", ready_run.pk])
    assert f'id="chat-run-{ready_run.pk}"' in page and f'data-live-src="{src}"' in page
    fetched = client.get(src)
    assert fetched.status_code == 200 and int(fetched["X-Live-Seq"]) > 0
    assert 'data-state="ready"' in fetched.content.decode()
    assert "data-not-ready" not in fetched.content.decode()

    def stop():
        ready_run.transition(RunState.STOPPING)

    element = f'id="chat-run-{ready_run.pk}"'
    messages = _pushes(member, stop, until=lambda ms: any(element in m["html"] for m in ms))
    html = next(m["html"] for m in messages if element in m["html"])
    assert 'data-state="stopping"' in html and "(<span" in html and "stopping</span>)" in html
    assert f"Send is off: run {ready_run.pk} is stopping." in html
    assert "Reload the page to go on with another ready run." in html


def test_a_send_before_the_script_loaded_posts_and_gets_the_message_back_in_its_box(
    client_as, member, operator, admin_user, ready_run
):
    conversation = Conversation.objects.create(user=member, run=ready_run, recipe=ready_run.recipe)
    client = client_as(member)
    url = reverse("chat-send", args=[conversation.pk])
    page = client.get(conversation.get_absolute_url()).content.decode()
    assert f'<form id="chat-form" class="chat-form" method="post" action="{url}"' in page

    response = client.post(url, {"content": "a secret <b>question</b>"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Not sent yet" in html and "press Send again" in html
    assert "a secret &lt;b&gt;question&lt;/b&gt;</textarea>" in html  # back in the box, escaped
    assert not Message.objects.exists()  # nothing sent or saved from here
    assert client.get(url).status_code == 405
    # Only the owner: someone else's is not found; an admin reads it but may not write.
    assert client_as(operator).post(url, {"content": "x"}).status_code == 404
    assert client_as(admin_user).post(url, {"content": "x"}).status_code == 403
