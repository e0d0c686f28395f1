"""Conversations worth keeping: export (Markdown, JSON), read-only share links, search,
and the team's system-prompt presets — who may do each, and no 500 for junk input."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from apps.chat.exports import FORMAT
from apps.chat.models import Conversation, Message, SystemPromptPreset
from apps.chat.search import MAX_QUERY, MAX_RESULTS
from apps.hosts.models import Host
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db

ANSWER = "# Plan\n\n```python\nprint('<b>hi</b>')\n```\n\n- one *two*"


@pytest.fixture
def ready(qwen):
    host = Host.objects.create(
        name="chat-keep", engine="process", simulated=True, sim_time_scale=20
    )
    return Run.objects.create(recipe=qwen, host=host, port=20002, image="x", state=RunState.READY)


@pytest.fixture
def chat(member, ready):
    """A member's conversation: a question, an answer with figures, an answer that broke."""
    conversation = Conversation.objects.create(
        user=member, run=ready, recipe=ready.recipe, title="Tuning: Qwen / KV cache?",
        system_prompt="Be terse.\n```\nnot a fence end", temperature=0.3, top_p=0.9,
        max_tokens=512,
    )  # fmt: skip
    Message.objects.create(conversation=conversation, role="user", content="How do I plan?")
    Message.objects.create(
        conversation=conversation, role="assistant", content=ANSWER, reasoning="thinking…",
        run=ready, ttft_s=0.4213, tok_s=35.14, prompt_tokens=12, completion_tokens=40,
        finish_reason="stop",
    )  # fmt: skip
    Message.objects.create(
        conversation=conversation, role="assistant", content="partial", run=ready,
        status=Message.Status.ERROR, error="the connection to the model server broke: EOF",
    )  # fmt: skip
    return conversation


def _export(client, conversation, fmt):
    return client.get(reverse(f"chat-export-{fmt}", args=[conversation.pk]))


# --- export ------------------------------------------------------------------------------


def test_markdown_export_has_the_settings_the_messages_verbatim_and_each_answers_figures(
    client_as, member, chat, ready
):
    response = _export(client_as(member), chat, "md")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="tuning-qwen-kv-cache.md"'
    text = response.content.decode()
    assert text.startswith("# Tuning: Qwen / KV cache?\n")
    assert f"- **Recipe:** {ready.recipe}" in text and f"- **Run:** {ready.pk} on chat-keep" in text
    assert "- **Temperature:** 0.3" in text and "- **top_p:** 0.9" in text
    assert "- **Max tokens:** 512" in text
    # The system prompt's own ``` cannot close its fence: the fence is longer.
    assert "````text\nBe terse.\n```\nnot a fence end\n````" in text
    assert "## You\n\nHow do I plan?" in text and "## Model" in text
    assert ANSWER in text  # the model's Markdown, verbatim
    assert (
        "*TTFT 0.42 s · 35.1 tok/s · simulated ×20 · 12 prompt + 40 completion tokens · "
        "finish: stop · status: complete*"
    ) in text
    assert "status: error · error: the connection to the model server broke: EOF*" in text
    assert text.index("How do I plan?") < text.index(ANSWER) < text.index("partial")


def test_json_export_follows_the_documented_schema(client_as, member, chat, ready):
    response = _export(client_as(member), chat, "json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == 'attachment; filename="tuning-qwen-kv-cache.json"'
    data = json.loads(response.content)
    assert data["format"] == FORMAT == "sparkpanel-chat/1"
    assert data["id"] == chat.pk and data["title"] == chat.title and data["user"] == "mia-member"
    assert data["recipe"]["id"] == ready.recipe.pk and data["run"] == {
        "id": ready.pk,
        "host": "chat-keep",
    }
    assert (data["temperature"], data["top_p"], data["max_tokens"]) == (0.3, 0.9, 512)
    assert data["system_prompt"] == chat.system_prompt and "share_token" not in data
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["user", "assistant", "assistant"]
    answer = data["messages"][1]
    assert answer["content"] == ANSWER and answer["reasoning"] == "thinking…"
    assert answer["ttft_s"] == 0.4213 and answer["clock_label"] == "simulated ×20"
    assert answer["completion_tokens"] == 40 and answer["finish_reason"] == "stop"
    assert answer["created_at"].startswith("20") and "T" in answer["created_at"]
    assert data["messages"][2]["status"] == "error" and "broke" in data["messages"][2]["error"]


def test_an_untitled_conversation_exports_under_its_number(client_as, member, ready):
    conversation = Conversation.objects.create(user=member, run=ready, title="«»!!")
    response = _export(client_as(member), conversation, "md")
    expected = f'attachment; filename="conversation-{conversation.pk}.md"'
    assert response["Content-Disposition"] == expected
    assert "- **System prompt:** none" in response.content.decode()


def test_only_who_may_read_a_conversation_exports_it(client_as, operator, admin_user, chat):
    for fmt in ("md", "json"):
        assert _export(client_as(operator), chat, fmt).status_code == 404
        assert _export(client_as(admin_user), chat, fmt).status_code == 200
        assert _export(Client(), chat, fmt).status_code == 302  # to the sign-in page


# --- share links -------------------------------------------------------------------------


def _share(client, conversation):
    response = client.post(reverse("chat-share", args=[conversation.pk]))
    conversation.refresh_from_db()
    return response


def test_the_owner_shares_a_read_only_link_a_teammate_opens_and_exports(
    client_as, member, operator, chat
):
    owner = client_as(member)
    assert chat.share_token == ""
    page = owner.get(chat.get_absolute_url()).content.decode()
    assert "Create a share link" in page
    assert _share(owner, chat).url == chat.get_absolute_url()
    token = chat.share_token
    assert len(token) == 43
    link = reverse("chat-shared", args=[token])
    page = owner.get(chat.get_absolute_url()).content.decode()
    assert f'value="http://testserver{link}"' in page and "Revoke the link" in page
    # Sharing again keeps the same link.
    _share(owner, chat)
    assert chat.share_token == token

    teammate = client_as(operator)
    response = teammate.get(link)
    html = response.content.decode()
    assert response.status_code == 200 and response["Referrer-Policy"] == "no-referrer"
    assert "How do I plan?" in html and "read-only" in html
    assert 'id="chat-form"' not in html and "Create a share link" not in html
    assert "Revoke the link" not in html and reverse("chat-settings", args=[chat.pk]) not in html
    assert reverse("chat-shared-export-md", args=[token]) in html
    md = teammate.get(reverse("chat-shared-export-md", args=[token]))
    assert md.status_code == 200 and ANSWER in md.content.decode()
    data = json.loads(teammate.get(reverse("chat-shared-export-json", args=[token])).content)
    assert data["id"] == chat.pk
    # The link lets them read, never write, nor reach the conversation by its number.
    assert teammate.get(chat.get_absolute_url()).status_code == 404
    assert (
        teammate.post(reverse("chat-settings", args=[chat.pk]), {"title": "x"}).status_code == 404
    )


def test_anonymous_visitors_of_a_shared_link_are_sent_to_sign_in(client_as, member, chat):
    _share(client_as(member), chat)
    for name in ("chat-shared", "chat-shared-export-md", "chat-shared-export-json"):
        response = Client().get(reverse(name, args=[chat.share_token]))
        assert response.status_code == 302 and response.url.startswith(reverse("login"))
        assert "How do I plan?" not in response.content.decode()


def test_a_revoked_link_is_gone_and_a_new_share_is_a_new_link(client_as, member, operator, chat):
    owner = client_as(member)
    _share(owner, chat)
    old = chat.share_token
    response = owner.post(reverse("chat-unshare", args=[chat.pk]), follow=True)
    assert "Link revoked" in response.content.decode()
    chat.refresh_from_db()
    assert chat.share_token == ""
    for name in ("chat-shared", "chat-shared-export-md", "chat-shared-export-json"):
        assert client_as(operator).get(reverse(name, args=[old])).status_code == 404
    _share(owner, chat)
    assert chat.share_token not in ("", old)
    # Audited, who and what, never the link itself.
    from apps.audit.models import AuditEntry

    rows = AuditEntry.objects.filter(target_type="conversation", target_id=str(chat.pk))
    assert list(rows.order_by("pk").values_list("action", "actor_name")) == [
        ("conversation.share", member.username),
        ("conversation.unshare", member.username),
        ("conversation.share", member.username),
    ]
    for row in rows.values():
        assert old not in str(row) and chat.share_token not in str(row)


def test_only_the_owner_shares_or_revokes(client_as, member, operator, admin_user, outsider, chat):
    for url in (reverse("chat-share", args=[chat.pk]), reverse("chat-unshare", args=[chat.pk])):
        assert client_as(operator).post(url).status_code == 404  # cannot even see it
        assert client_as(admin_user).post(url).status_code == 403  # reads it, not theirs
        assert client_as(outsider).post(url).status_code == 403  # no role
        assert Client().post(url).status_code == 302
    assert client_as(member).get(reverse("chat-share", args=[chat.pk])).status_code == 405
    chat.refresh_from_db()
    assert chat.share_token == ""
    admin_page = client_as(admin_user).get(chat.get_absolute_url()).content.decode()
    assert "Create a share link" not in admin_page


def test_unknown_or_malformed_share_tokens_are_404(client_as, operator, chat):
    client = client_as(operator)
    for token in ("x" * 43, "short", "y" * 200):
        assert client.get(reverse("chat-shared", args=[token])).status_code == 404
    assert client.get("/chat/shared/has%20space/").status_code == 404
    assert client.get("/chat/shared//").status_code == 404


# --- search ------------------------------------------------------------------------------


def test_search_finds_conversations_by_message_content_with_an_escaped_snippet(
    client_as, member, operator, ready, chat
):
    evil = Conversation.objects.create(user=member, run=ready, title="other")
    Message.objects.create(
        conversation=evil, role="assistant",
        content="x" * 100 + " then <script>alert('NEEDLE')</script> and " + "y" * 100,
    )  # fmt: skip
    theirs = Conversation.objects.create(user=operator, run=ready, title="operator's")
    Message.objects.create(conversation=theirs, role="user", content="needle too")
    html = client_as(member).get(reverse("chat"), {"q": "  needle "}).content.decode()
    assert evil.get_absolute_url() in html and chat.get_absolute_url() not in html
    assert theirs.get_absolute_url() not in html
    assert "&lt;script&gt;alert(&#x27;<mark>NEEDLE</mark>&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "…" + "x" * 30 in html and "y" * 30 + "…" in html and "x" * 41 not in html
    assert "1 conversation match" in html and 'value="needle"' in html
    # By title too, and each conversation once, however many messages match.
    Message.objects.create(conversation=chat, role="user", content="plan plan")
    html = client_as(member).get(reverse("chat"), {"q": "PLAN"}).content.decode()
    assert html.count(f'href="{chat.get_absolute_url()}"') == 1
    assert "<mark>plan</mark>" in html
    html = client_as(member).get(reverse("chat"), {"q": "kv cache"}).content.decode()
    assert chat.get_absolute_url() in html and evil.get_absolute_url() not in html


def test_admins_search_everyones_conversations(client_as, admin_user, chat):
    html = client_as(admin_user).get(reverse("chat"), {"q": "how do i"}).content.decode()
    assert chat.get_absolute_url() in html and "<mark>How do I</mark>" in html


def test_search_is_bounded_and_explains_a_bad_query(client_as, member, chat, ready):
    client = client_as(member)
    response = client.get(reverse("chat"), {"q": "a" * (MAX_QUERY + 1)})
    html = response.content.decode()
    assert response.status_code == 200
    assert f"Search for at most {MAX_QUERY} characters (that was {MAX_QUERY + 1})" in html
    assert chat.get_absolute_url() not in html
    assert client.get(reverse("chat"), {"q": "a" * MAX_QUERY}).status_code == 200
    response = client.get(reverse("chat"), {"q": "plan\x00"})
    assert response.status_code == 200 and "NUL" in response.content.decode()
    for junk in ("%", "_", "\\", "'; drop table", "🙂" * 50):
        assert client.get(reverse("chat"), {"q": junk}).status_code == 200
    assert chat.get_absolute_url() in client.get(reverse("chat"), {"q": "   "}).content.decode()
    Conversation.objects.bulk_create(
        Conversation(user=member, run=ready, title=f"needle {i}") for i in range(MAX_RESULTS + 5)
    )
    html = client.get(reverse("chat"), {"q": "needle"}).content.decode()
    assert f"{MAX_RESULTS} conversations match" in html and "refine the search" in html


# --- presets -----------------------------------------------------------------------------


def test_a_member_saves_a_preset_from_a_conversation_and_applies_it(client_as, member, chat):
    client = client_as(member)
    response = client.post(
        reverse("chat-preset-new"), {"name": "  Terse  reviewer ", "conversation": chat.pk}
    )
    assert response.url == chat.get_absolute_url()
    preset = SystemPromptPreset.objects.get()
    assert preset.name == "Terse reviewer" and preset.text == chat.system_prompt
    assert preset.created_by == member
    other = SystemPromptPreset.objects.create(name="Pirate", text="Answer like a pirate.")
    page = client.get(chat.get_absolute_url()).content.decode()
    assert f'<option value="{other.pk}">Pirate</option>' in page
    response = client.post(reverse("chat-preset-apply", args=[chat.pk]), {"preset": other.pk})
    chat.refresh_from_db()
    assert chat.system_prompt == "Answer like a pirate."
    html = client.get(response.url).content.decode()
    assert "applies to the next answer" in html


def test_a_preset_from_text_and_a_duplicate_name_is_a_clear_error(client_as, member, operator):
    client_as(member).post(reverse("chat-preset-new"), {"name": "Reviewer", "text": "Review."})
    assert SystemPromptPreset.objects.get().text == "Review."
    response = client_as(operator).post(
        reverse("chat-preset-new"), {"name": "reviewer", "text": "Other."}, follow=True
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "A preset named “reviewer” already exists: pick another name." in html
    assert SystemPromptPreset.objects.count() == 1
    for bad, message in (
        ({"name": "", "text": "x"}, "Name: This field is required."),
        ({"name": "   ", "text": "x"}, "Name: This field is required."),
        ({"name": "n" * 81, "text": "x"}, "at most 80 characters"),
        ({"name": "ok"}, "Text: This field is required."),
        ({"name": "ok", "text": "t" * 20_001}, "at most 20000 characters"),
        ({"name": "ok\x00", "text": "x"}, "Null characters are not allowed."),
    ):
        response = client_as(member).post(reverse("chat-preset-new"), bad, follow=True)
        assert response.status_code == 200 and message in response.content.decode(), bad
    assert SystemPromptPreset.objects.count() == 1
    assert "Reviewer" in client_as(member).get(reverse("chat")).content.decode()


def test_presets_need_the_chat_permission_and_a_readable_conversation(
    client_as, member, operator, outsider, chat
):
    url = reverse("chat-preset-new")
    assert client_as(outsider).post(url, {"name": "x", "text": "y"}).status_code == 403
    # Someone else's conversation cannot be used as the source of a preset.
    response = client_as(operator).post(url, {"name": "stolen", "conversation": chat.pk})
    assert response.status_code == 404
    empty = Conversation.objects.create(user=member, run=chat.run)
    response = client_as(member).post(url, {"name": "x", "conversation": empty.pk}, follow=True)
    assert "has no system prompt to save" in response.content.decode()
    assert not SystemPromptPreset.objects.exists()
    preset = SystemPromptPreset.objects.create(name="P", text="T")
    apply = reverse("chat-preset-apply", args=[chat.pk])
    assert client_as(operator).post(apply, {"preset": preset.pk}).status_code == 404
    chat.refresh_from_db()
    assert chat.system_prompt != "T"


def test_a_preset_is_deleted_by_its_creator_or_an_admin_only(
    client_as, member, operator, admin_user
):
    mine = SystemPromptPreset.objects.create(name="Mine", text="t", created_by=member)
    orphan = SystemPromptPreset.objects.create(name="Orphan", text="t", created_by=None)
    delete = lambda preset: reverse("chat-preset-delete", args=[preset.pk])  # noqa: E731
    assert client_as(operator).post(delete(mine)).status_code == 403
    assert client_as(member).post(delete(orphan)).status_code == 403
    assert client_as(member).get(delete(mine)).status_code == 405
    assert SystemPromptPreset.objects.count() == 2
    index = client_as(operator).get(reverse("chat")).content.decode()
    assert delete(mine) not in index
    assert delete(mine) in client_as(member).get(reverse("chat")).content.decode()
    assert client_as(member).post(delete(mine)).url == reverse("chat")
    assert client_as(admin_user).post(delete(orphan)).status_code == 302
    assert not SystemPromptPreset.objects.exists()
    assert client_as(member).post(delete(mine)).status_code == 404


# --- junk input --------------------------------------------------------------------------


def test_junk_input_is_never_a_500(client_as, member, chat):
    client = client_as(member)
    apply = reverse("chat-preset-apply", args=[chat.pk])
    for value in ("", "abc", "-1", "1.5", "９", "9" * 40, "0"):
        response = client.post(apply, {"preset": value}, follow=True)
        assert response.status_code == 200, value
        assert "Pick a preset to apply" in response.content.decode()
    assert client.post(apply).status_code == 302
    for value in ("", "abc", "9" * 40):
        response = client.post(reverse("chat-preset-new"), {"name": "n", "conversation": value})
        assert response.status_code == 404, value
    assert client.post(reverse("chat-preset-new")).status_code == 302
    huge = "9" * 30
    for url in (
        f"/chat/{huge}/export.md",
        f"/chat/{huge}/share/",
        f"/chat/{huge}/preset/",
        f"/chat/presets/{huge}/delete/",
        "/chat/abc/export.json",
        "/chat/presets/abc/delete/",
    ):
        method = client.get if "export" in url else client.post
        assert method(url).status_code == 404, url
    assert chat.system_prompt == Conversation.objects.get(pk=chat.pk).system_prompt
