"""Chat pages: members see their own conversations, admins read everyone's, nobody writes
into someone else's."""

import pytest
from django.urls import reverse

from apps.chat.models import Conversation, Message
from apps.hosts.models import Host
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(qwen):
    host = Host.objects.create(name="chat-pages", engine="process", simulated=True)
    return Run.objects.create(recipe=qwen, host=host, port=20001, image="x", state=RunState.READY)


def test_a_member_starts_a_chat_with_a_ready_run_and_sees_only_their_own(
    client_as, member, operator, ready
):
    client = client_as(member)
    assert f"run {ready.pk}" in client.get(reverse("chat")).content.decode()
    response = client.post(reverse("chat-new"), {"run": ready.pk})
    mine = Conversation.objects.get(user=member)
    assert response.url == mine.get_absolute_url() and mine.recipe == ready.recipe
    theirs = Conversation.objects.create(user=operator, run=ready, title="operator's secret")
    Message.objects.create(conversation=theirs, role="user", content="secret question")
    assert "operator&#x27;s secret" not in client.get(reverse("chat")).content.decode()
    assert client.get(theirs.get_absolute_url()).status_code == 404
    message = theirs.messages.get()
    assert client.get(reverse("chat-message", args=[message.pk])).status_code == 404
    assert (
        client.post(reverse("chat-settings", args=[theirs.pk]), {"title": "x"}).status_code == 404
    )


def test_admins_read_everyones_conversations_but_cannot_write_into_them(
    client_as, admin_user, member, ready
):
    conversation = Conversation.objects.create(user=member, run=ready, title="mia's chat")
    client = client_as(admin_user)
    assert "mia&#x27;s chat" in client.get(reverse("chat")).content.decode()
    html = client.get(conversation.get_absolute_url()).content.decode()
    assert "read-only" in html and 'id="chat-form"' not in html
    response = client.post(reverse("chat-settings", args=[conversation.pk]), {"title": "mine now"})
    assert response.status_code == 403


def test_settings_are_validated_and_kept_on_error(client_as, member, ready):
    conversation = Conversation.objects.create(user=member, run=ready)
    client = client_as(member)
    bad = {
        "title": "t",
        "system_prompt": "keep me",
        "temperature": 5,
        "top_p": 1,
        "max_tokens": 100,
    }
    response = client.post(reverse("chat-settings", args=[conversation.pk]), bad)
    assert response.status_code == 400 and "keep me" in response.content.decode()
    good = {**bad, "temperature": 0.2}
    client.post(reverse("chat-settings", args=[conversation.pk]), good)
    conversation.refresh_from_db()
    assert conversation.temperature == 0.2 and conversation.system_prompt == "keep me"


def test_starting_a_chat_needs_a_ready_run(client_as, member, ready):
    Run.objects.filter(pk=ready.pk).update(state=RunState.LOADING)
    response = client_as(member).post(reverse("chat-new"), {"run": ready.pk}, follow=True)
    assert "not ready" in response.content.decode() and not Conversation.objects.exists()
    response = client_as(member).post(reverse("chat-new"), {"run": "junk"}, follow=True)
    assert "Pick a ready run" in response.content.decode()
