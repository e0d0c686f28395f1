"""A chat with an on-demand model (issue #42, point 2): the chat page lists the catalog's
models with where each stands, a new chat with one asks for its load, and the
conversation's load endpoint says where it stands and attaches the run once it is ready.
The browser side is tests/e2e/test_chat_on_demand.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.chat.models import Conversation
from apps.gateway.models import OnDemand
from apps.runs.models import Run, RunState

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_gateway_keys")]


@pytest.fixture
def entry(qwen, sim_host):
    entry = OnDemand.objects.create(recipe=qwen)
    entry.hosts.add(sim_host)
    return entry


def test_the_chat_page_lists_on_demand_models_and_a_new_chat_loads_one(
    client_as, member, entry, sim_host, qwen
):
    client = client_as(member)
    page = client.get(reverse("chat")).content.decode()
    assert "Load and chat" in page and f"can load on {sim_host.name}" in page
    response = client.post(reverse("chat-new"), {"recipe": qwen.pk})
    conversation = Conversation.objects.get(user=member)
    assert response.status_code == 302 and response["Location"] == conversation.get_absolute_url()
    run = Run.objects.get(recipe=qwen, on_demand=True)
    assert conversation.recipe == qwen and conversation.run is None
    page = client.get(conversation.get_absolute_url()).content.decode()
    assert (
        'id="chat-load"' in page and f"loading model {qwen.public_name} on {sim_host.name}" in page
    )

    url = reverse("chat-load", args=[conversation.pk])
    data = client.get(url).json()
    assert (data["state"], data["ready"]) == ("loading", False)
    Run.objects.filter(pk=run.pk).update(state=RunState.READY)
    data = client.get(url).json()
    assert (data["state"], data["ready"]) == ("ready", True)
    # The page's live run line, now about this run (static/js/chat.js puts it in place).
    assert (
        f'id="chat-run-{run.pk}"' in data["run_html"] and 'data-state="ready"' in data["run_html"]
    )
    conversation.refresh_from_db()
    assert conversation.run == run and conversation.run_ready
    # Ready: the load panel is hidden (the page shows it again if the run stops).
    page = client.get(conversation.get_absolute_url()).content.decode()
    assert 'data-state="ready" hidden>' in page and "loading model" not in page


def test_only_the_owner_loads_and_only_catalog_models(
    client_as, member, operator, entry, qwen, too_long
):
    mine = Conversation.objects.create(user=member, recipe=qwen)
    url = reverse("chat-load", args=[mine.pk])
    assert client_as(operator).post(url).status_code == 404  # not theirs to see
    assert not Run.objects.exists()
    other = Conversation.objects.create(user=member, recipe=too_long)
    assert client_as(member).get(reverse("chat-load", args=[other.pk])).status_code == 404
    response = client_as(member).post(reverse("chat-new"), {"recipe": too_long.pk})
    assert response.status_code == 302 and not Run.objects.exists()
    response = client_as(member).post(reverse("chat-new"), {"recipe": "x"})
    assert response.status_code == 302 and Conversation.objects.count() == 2
    # The owner's POST asks for the load, as a request through /v1 would.
    data = client_as(member).post(url).json()
    assert data["state"] == "loading" and Run.objects.filter(recipe=qwen).count() == 1


def test_a_model_that_cannot_load_is_said_on_the_chat_page(client_as, member, entry, qwen,
                                                          sim_host, too_long):  # fmt: skip
    Run.objects.create(recipe=too_long, host=sim_host, port=sim_host.port_min, image="x",
                       state=RunState.READY, pinned=True)  # fmt: skip
    client = client_as(member)
    assert "cannot load now" in client.get(reverse("chat")).content.decode()
    response = client.post(reverse("chat-new"), {"recipe": qwen.pk}, follow=True)
    assert "cannot load now" in response.content.decode()
    assert not Conversation.objects.exists()
