from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import MANAGE_USERS, USE_CHAT
from apps.chat import search
from apps.chat.consumers import MAX_INPUT_CHARS
from apps.chat.models import Comparison, Conversation, Message, SystemPromptPreset
from apps.chat.selectors import visible_to
from apps.core.ids import form_id
from apps.gateway import catalog
from apps.gateway.models import OnDemand
from apps.runs.models import Run, RunState


class SettingsForm(forms.ModelForm):
    class Meta:
        model = Conversation
        fields = ["title", "system_prompt", "temperature", "top_p", "max_tokens"]
        widgets = {"system_prompt": forms.Textarea(attrs={"rows": 3})}


def _visible(request: HttpRequest):
    """Members see their own conversations; admins see everyone's (read-only)."""
    return visible_to(request.user, Conversation.objects.select_related("user", "run", "recipe"))


def _on_demand_choices(ready) -> list[dict]:
    """The catalog's models no ready run serves, with where each stands (a chat with one
    loads it: docs/chat.md, "Models on demand")."""
    served = {run.recipe_id for run in ready}
    entries = OnDemand.objects.select_related("recipe").exclude(recipe_id__in=served)
    return [{"recipe": e.recipe, "state": catalog.state_of(e)} for e in entries[:MAX_ON_DEMAND]]


@require_GET
def chat_index(request: HttpRequest) -> HttpResponse:
    ready = list(Run.objects.filter(state=RunState.READY).select_related("recipe", "host"))
    return render(request, "chat/index.html", {
        "ready_runs": ready, "on_demand": _on_demand_choices(ready), **_search_context(request),
        "presets": SystemPromptPreset.objects.select_related("created_by")[:MAX_PRESETS_SHOWN],
        "show_owner": request.user.has_perm(MANAGE_USERS),
        "comparisons": Comparison.objects.filter(user=request.user)[:MAX_COMPARISONS_SHOWN],
    })  # fmt: skip


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def chat_new(request: HttpRequest) -> HttpResponse:
    if "recipe" in request.POST:
        return _chat_on_demand(request)
    try:
        run = Run.objects.select_related("recipe").get(pk=int(request.POST.get("run", "")))
    except (ValueError, Run.DoesNotExist):
        messages.error(request, "Pick a ready run to chat with.")
        return redirect("chat")
    if run.state != RunState.READY:
        messages.error(request, f"Run {run.pk} is {run.get_state_display().lower()}, not ready.")
        return redirect("chat")
    conversation = Conversation.objects.create(user=request.user, run=run, recipe=run.recipe)
    return redirect(conversation)


def _chat_on_demand(request: HttpRequest) -> HttpResponse:
    """A chat with an on-demand model: its ready run, else a load asked for by this member,
    and the conversation page shows the load and sends once the model is ready."""
    entry = _catalog_entry(form_id(request.POST.get("recipe")))
    if entry is None:
        messages.error(request, "Pick a model of the on-demand catalog.")
        return redirect("chat")
    state = catalog.request_load(entry.recipe_id, request.user)
    if state.state == "cannot_load":
        messages.error(request, state.message)
        return redirect("chat")
    run = (
        Run.objects.filter(pk=state.run_id, state=RunState.READY).first() if state.run_id else None
    )
    conversation = Conversation.objects.create(user=request.user, run=run, recipe=entry.recipe)
    return redirect(conversation)


def _catalog_entry(recipe_id: int | None) -> OnDemand | None:
    """The on-demand catalog's entry for a recipe, if it is in the catalog."""
    if recipe_id is None:
        return None
    return OnDemand.objects.select_related("recipe").filter(recipe_id=recipe_id).first()


def _load_context(request: HttpRequest, conversation: Conversation) -> dict | None:
    """For a conversation whose model is in the on-demand catalog: where its load stands,
    for the page's load panel (None for other conversations). While its run is ready the
    panel is hidden (and the placement, which measures every allowed Spark, is not asked);
    the page shows it when that run stops."""
    entry = _catalog_entry(conversation.recipe_id)
    if entry is None:
        return None
    ready = {"state": "ready", "message": "", "percent": None}
    state = ready if conversation.run_ready else catalog.state_of(entry)
    return {"url": reverse("chat-load", args=[conversation.pk]), "state": state}


@require_http_methods(["GET", "POST"])
def conversation_load(request: HttpRequest, pk: int) -> JsonResponse:
    """Where the conversation's on-demand model stands (GET), or load it (POST: the
    member asks, as a request through /v1 would). Once it is ready the conversation goes
    on with its run, and the page sends what was typed meanwhile."""
    conversation = _conversation(request, pk)
    if conversation.user_id != request.user.pk or not request.user.has_perm(USE_CHAT):
        raise PermissionDenied
    entry = _catalog_entry(conversation.recipe_id)
    if entry is None:
        return JsonResponse({"error": "this model is not in the on-demand catalog"}, status=404)
    if request.method == "POST":
        state = catalog.request_load(entry.recipe_id, request.user)
    else:
        state = catalog.state_of(entry)
    ready, run_html = False, ""
    if state.state == "ready" and state.run_id:
        run = Run.objects.filter(pk=state.run_id, state=RunState.READY).first()
        if run is not None:
            if conversation.run_id != run.pk:
                conversation.run = run
                conversation.save(update_fields=["run", "updated_at"])
            ready = True
            # The page's live line about its run (apps/chat/live.py), now about this run:
            # the page puts it in place and follows this run's state from then on.
            run_html = render_to_string("chat/partials/run_state.html", {"run": run})
    return JsonResponse({**state.as_dict(), "ready": ready, "run_html": run_html})


def _conversation(request: HttpRequest, pk: int) -> Conversation:
    conversation = get_object_or_404(_visible(request), pk=pk)
    return conversation


def _messages(conversation: Conversation):
    # With their runs and hosts: each answer's figures name their clock (sim_label).
    return conversation.messages.select_related("run__host")


@require_GET
def conversation_page(request: HttpRequest, pk: int) -> HttpResponse:
    return _conversation_page(request, _conversation(request, pk))


def _conversation_page(request: HttpRequest, conversation: Conversation, *, draft: str = ""):
    owner = conversation.user_id == request.user.pk
    return render(request, "chat/conversation.html", {
        "conversation": conversation, "chat_messages": _messages(conversation),
        "form": SettingsForm(instance=conversation), "owner": owner,
        "can_write": owner and request.user.has_perm(USE_CHAT),
        "ready": conversation.run_ready,
        "ready_runs": Run.objects.filter(state=RunState.READY).select_related("recipe", "host"),
        "load": _load_context(request, conversation), "draft": draft,
        **_keeping_context(request, conversation),
    })  # fmt: skip


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def conversation_send(request: HttpRequest, pk: int) -> HttpResponse:
    """The message form's own action, for a Send pressed before chat.js has loaded (the
    page sends over its socket; a form without a method would have put the message in a
    GET URL, into histories and access logs). Nothing is sent from here — an answer
    streams over the socket — so the page comes back with the message in its box and
    says so."""
    conversation = _conversation(request, pk)
    if conversation.user_id != request.user.pk:
        raise PermissionDenied
    draft = request.POST.get("content", "")[:MAX_DRAFT_CHARS]
    messages.warning(request, NOT_SENT_YET)
    return _conversation_page(request, conversation, draft=draft)


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def conversation_settings(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = _conversation(request, pk)
    if conversation.user_id != request.user.pk:
        raise PermissionDenied
    form = SettingsForm(request.POST, instance=conversation)
    if form.is_valid():
        form.save()
        messages.success(request, "Settings saved; they apply to the next answer.")
        return redirect(conversation)
    return render(request, "chat/conversation.html", {
        "conversation": conversation, "chat_messages": _messages(conversation), "form": form,
        "owner": True, "can_write": True,
        "ready": conversation.run_ready,
        **_keeping_context(request, conversation),
    }, status=400)  # fmt: skip


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def conversation_switch_run(request: HttpRequest, pk: int) -> HttpResponse:
    """Go on with the same conversation on another ready run (e.g. after a restart)."""
    conversation = _conversation(request, pk)
    if conversation.user_id != request.user.pk:
        raise PermissionDenied
    run_id = form_id(request.POST.get("run"))
    run = Run.objects.filter(pk=run_id, state=RunState.READY).first() if run_id else None
    if run is None:
        messages.error(request, "That run is not ready.")
    else:
        conversation.run, conversation.recipe = run, run.recipe
        conversation.save()
    return redirect(conversation)


@require_GET
def message_json(request: HttpRequest, pk: int) -> JsonResponse:
    """The saved text of one message (a client that missed a delta re-fetches it)."""
    message = get_object_or_404(Message.objects.select_related("conversation"), pk=pk)
    _conversation(request, message.conversation_id)  # 404 unless visible to this user
    return JsonResponse(message.as_dict())


def _search_context(request: HttpRequest) -> dict:
    """The conversation list, filtered by `?q=` when there is one (apps/chat/search.py)."""
    query = search.clean_query(request.GET.get("q"))
    if query.error:
        return {"conversations": [], "q": query.shown,
                "search_error": query.error, "searching": True}  # fmt: skip
    if not query.text:
        return {"conversations": _visible(request)[: search.MAX_RESULTS], "q": ""}
    hits = search.search(_visible(request), query.text)
    return {"conversations": hits, "q": query.text, "searching": True,
            "truncated": len(hits) >= search.MAX_RESULTS}  # fmt: skip


# The most presets a page lists (the team's shared system prompts, apps/chat/keeping.py).
MAX_COMPARISONS_SHOWN = 20
MAX_ON_DEMAND = 100  # catalog models listed for a new chat
MAX_DRAFT_CHARS = MAX_INPUT_CHARS  # a message given back to its box (the socket's own cap)
NOT_SENT_YET = (
    "Not sent yet: the page had not finished loading when you pressed Send. Your message is "
    "in the box below: press Send again."
)
MAX_PRESETS_SHOWN = 500


def _keeping_context(request: HttpRequest, conversation: Conversation) -> dict:
    """The conversation page's Share and Presets cards: for its owner only."""
    if conversation.user_id != request.user.pk:
        return {}
    token = conversation.share_token
    url = reverse("chat-shared", args=[token]) if token else ""
    return {
        "share_url": request.build_absolute_uri(url) if url else "",
        "presets": SystemPromptPreset.objects.only("pk", "name")[:MAX_PRESETS_SHOWN],
    }
