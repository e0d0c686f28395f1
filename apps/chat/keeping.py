"""Conversations worth keeping (docs/chat.md, "Keeping conversations"): export as Markdown
or JSON, read-only share links, and the team's system-prompt presets. The search is the
conversation list's (`?q=`, apps/chat/search.py).

Who may do what: whoever may read a conversation exports it (its owner; admins, who read
everyone's; anyone signed in holding its share link); only its owner shares it, revokes
the link or applies a preset to it; anyone who chats saves a preset; a preset's creator or
an admin deletes it.
"""

from __future__ import annotations

import secrets

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import MANAGE_USERS, USE_CHAT
from apps.audit import services as audit
from apps.chat import exports
from apps.chat.models import Conversation, SystemPromptPreset
from apps.chat.views import _conversation, _messages
from apps.core.ids import form_id

TOKEN_LENGTH = 43  # secrets.token_urlsafe(32): 32 random bytes, 43 URL-safe characters


def _shared(token: str) -> Conversation:
    """The conversation this link shares: 404 for a revoked, unknown or malformed one."""
    if not token or len(token) != TOKEN_LENGTH:
        raise Http404("No conversation is shared under this link.")
    qs = Conversation.objects.select_related("user", "run__host", "recipe")
    return get_object_or_404(qs.exclude(share_token=""), share_token=token)


def _owned(request: HttpRequest, pk: int) -> Conversation:
    """The user's own conversation: 404 if they cannot see it, 403 if it is someone else's."""
    conversation = _conversation(request, pk)
    if conversation.user_id != request.user.pk:
        raise PermissionDenied
    return conversation


def _export(conversation: Conversation, fmt: str) -> HttpResponse:
    chat = list(_messages(conversation))
    if fmt == "json":
        data = exports.to_json(conversation, chat, timezone.now())
        response = JsonResponse(data, json_dumps_params={"indent": 2, "ensure_ascii": False})
    else:
        text = exports.to_markdown(conversation, chat)
        response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    name = exports.filename(conversation, fmt)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
def export_md(request: HttpRequest, pk: int) -> HttpResponse:
    """`/chat/<pk>/export.md`: the owner's, or an admin's reading it (404 for anyone else)."""
    return _export(_conversation(request, pk), "md")


@require_GET
def export_json(request: HttpRequest, pk: int) -> HttpResponse:
    return _export(_conversation(request, pk), "json")


def _shared_export(token: str, fmt: str) -> HttpResponse:
    response = _export(_shared(token), fmt)
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_GET
def shared_md(request: HttpRequest, token: str) -> HttpResponse:
    """`/chat/shared/<token>/export.md`: for anyone signed in who holds the link."""
    return _shared_export(token, "md")


@require_GET
def shared_json(request: HttpRequest, token: str) -> HttpResponse:
    return _shared_export(token, "json")


@require_GET
def shared_page(request: HttpRequest, token: str) -> HttpResponse:
    """A shared conversation, read-only for everyone (its owner included: they write on
    its own page). Login is required, as everywhere (the project's middleware)."""
    conversation = _shared(token)
    response = render(request, "chat/conversation.html", {
        "conversation": conversation, "chat_messages": _messages(conversation),
        "owner": False, "can_write": False, "shared_token": token,
        "shared_by_me": conversation.user_id == request.user.pk,
        "ready": conversation.run_ready,
    })  # fmt: skip
    # The token is in this page's address: never send it on to another site.
    response["Referrer-Policy"] = "no-referrer"
    return response


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def conversation_share(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _owned(request, pk)
    if conversation.share_token:
        messages.info(request, "This conversation is already shared: the link is below.")
    else:
        token = secrets.token_urlsafe(32)
        Conversation.objects.filter(pk=conversation.pk).update(share_token=token)
        audit.record("conversation.share", conversation)  # the link itself is not logged
        messages.success(
            request,
            "Shared: anyone signed in to the panel who has the link can read this "
            "conversation (never write into it). Revoke the link to stop that.",
        )
    return redirect(conversation)


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def conversation_unshare(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _owned(request, pk)
    if conversation.share_token:
        Conversation.objects.filter(pk=conversation.pk).update(share_token="")
        audit.record("conversation.unshare", conversation)
        messages.success(request, "Link revoked: it no longer opens this conversation.")
    else:
        messages.info(request, "This conversation was not shared.")
    return redirect(conversation)


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def preset_apply(request: HttpRequest, pk: int) -> HttpResponse:
    """Sets the conversation's system prompt to a preset's text (from the next answer)."""
    conversation = _owned(request, pk)
    preset_id = form_id(request.POST.get("preset"))
    preset = SystemPromptPreset.objects.filter(pk=preset_id).first() if preset_id else None
    if preset is None:
        messages.error(request, "Pick a preset to apply (that one does not exist any more).")
        return redirect(conversation)
    conversation.system_prompt = preset.text
    conversation.save(update_fields=["system_prompt", "updated_at"])
    messages.success(
        request,
        f"System prompt set from the preset “{preset.name}”: it applies to the next answer.",
    )
    return redirect(conversation)


class PresetForm(forms.ModelForm):
    class Meta:
        model = SystemPromptPreset
        fields = ["name", "text"]

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].split())
        if not name:
            raise forms.ValidationError("Give the preset a name (1–80 characters).")
        if SystemPromptPreset.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError(
                f"A preset named “{name}” already exists: pick another name."
            )
        return name


def _preset_text(request: HttpRequest) -> str:
    """The text to save: the named conversation's system prompt (one the user may read),
    else the `text` field."""
    if "conversation" not in request.POST:
        return request.POST.get("text", "")
    pk = form_id(request.POST.get("conversation"))
    if pk is None:
        raise Http404("No such conversation.")
    return _conversation(request, pk).system_prompt


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def preset_new(request: HttpRequest) -> HttpResponse:
    """Saves a system prompt as a team preset; back to where the form was, with the outcome."""
    text = _preset_text(request)
    back = redirect("chat")
    if "conversation" in request.POST:
        back = redirect("chat-conversation", pk=form_id(request.POST["conversation"]))
        if not text.strip():
            messages.error(request, "This conversation has no system prompt to save.")
            return back
    form = PresetForm({"name": request.POST.get("name", ""), "text": text})
    if form.is_valid():
        try:
            with transaction.atomic():
                preset = form.save(commit=False)
                preset.created_by = request.user
                preset.save()
        except IntegrityError:  # the same name, saved by someone else a moment ago
            form.add_error("name", "A preset with this name was just saved: pick another name.")
    if form.errors:
        problems = "; ".join(
            f"{'Name' if field == 'name' else 'Text'}: {' '.join(errors)}"
            for field, errors in form.errors.items()
        )
        messages.error(request, f"The preset was not saved. {problems}")
        return back
    messages.success(
        request, f"Saved the team preset “{preset.name}”: anyone who chats can apply it."
    )
    return back


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def preset_delete(request: HttpRequest, pk: int) -> HttpResponse:
    preset = get_object_or_404(SystemPromptPreset, pk=pk)
    mine = preset.created_by_id is not None and preset.created_by_id == request.user.pk
    if not (mine or request.user.has_perm(MANAGE_USERS)):
        raise PermissionDenied("Only the preset's creator or an admin can delete it.")
    preset.delete()
    messages.success(request, f"Deleted the preset “{preset.name}”.")
    return redirect("chat")
