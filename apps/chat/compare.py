"""Side by side: one prompt to two or three ready runs at once, and the team's votes.

A comparison is a set of conversations (one per column, `Conversation.comparison` and
`.column`): the page opens one chat socket per column (apps/chat/consumers.py) and sends
the same message to each, so every column streams, stops and is counted like any chat.
After a turn the user marks the better answer (or a tie): an ArenaVote, counted per pair
of recipes on the arena page (apps/chat/arena.py).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import USE_CHAT
from apps.chat import arena
from apps.chat.models import ArenaVote, Comparison, Conversation, Message
from apps.chat.selectors import visible_to
from apps.chat.sides import SIDES, TIE, side, verdict
from apps.chat.views import MAX_DRAFT_CHARS, NOT_SENT_YET, SettingsForm
from apps.core.ids import form_id, form_ids
from apps.runs.models import Run, RunState


class CompareSettingsForm(SettingsForm):
    """The conversation's settings, less its title, that every column of a comparison
    shares (saved on each column)."""

    class Meta(SettingsForm.Meta):
        fields = ["system_prompt", "temperature", "top_p", "max_tokens"]


def _visible(request: HttpRequest):
    return visible_to(request.user, Comparison.objects.select_related("user"))


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def compare_new(request: HttpRequest) -> HttpResponse:
    """Start a comparison of the ready runs picked (2 or 3, each once)."""
    picked = form_ids(request.POST.getlist("runs")[: Comparison.MAX_COLUMNS + 1],
                      Comparison.MAX_COLUMNS)  # fmt: skip
    if not 2 <= len(picked) <= Comparison.MAX_COLUMNS:
        messages.error(request, "Pick two or three different ready runs to compare.")
        return redirect("chat")
    runs = {r.pk: r for r in Run.objects.select_related("recipe").filter(pk__in=picked)}
    not_ready = [str(pk) for pk in picked if pk not in runs or runs[pk].state != RunState.READY]
    if not_ready:
        messages.error(request, f"Not ready: run {', '.join(not_ready)}. Pick ready runs.")
        return redirect("chat")
    with transaction.atomic():
        comparison = Comparison.objects.create(
            user=request.user, title=" vs ".join(str(runs[pk].recipe) for pk in picked)[:200]
        )
        for column, pk in enumerate(picked):
            Conversation.objects.create(
                user=request.user, run=runs[pk], recipe=runs[pk].recipe,
                comparison=comparison, column=column,
            )  # fmt: skip
    return redirect(comparison)


def _columns(comparison: Comparison) -> list[dict]:
    columns = []
    for conv in comparison.columns.select_related("run__host", "recipe").order_by("column"):
        columns.append({
            "letter": side(conv.column),
            "verdict": verdict(conv.column),  # its vote button
            "conversation": conv,
            "messages": conv.messages.select_related("run__host"),
            "ready": conv.run_ready,
        })  # fmt: skip
    return columns


@require_GET
def compare_page(request: HttpRequest, pk: int) -> HttpResponse:
    return _compare_page(request, get_object_or_404(_visible(request), pk=pk))


def _compare_page(request: HttpRequest, comparison: Comparison, *, draft: str = ""):
    owner = comparison.user_id == request.user.pk
    columns = _columns(comparison)
    first = columns[0]["conversation"] if columns else None
    votes = {v.turn: v.winner_column for v in comparison.votes.all()}
    turns = first.messages.filter(role=Message.Role.USER).count() if first else 0
    return render(request, "chat/compare.html", {
        "comparison": comparison, "columns": columns, "owner": owner,
        "can_write": owner and request.user.has_perm(USE_CHAT),
        "all_ready": bool(columns) and all(c["ready"] for c in columns),
        "form": CompareSettingsForm(instance=first) if first else None,
        "votes": votes, "turns": turns, "tie": TIE, "draft": draft,
    })  # fmt: skip


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def compare_send(request: HttpRequest, pk: int) -> HttpResponse:
    """The send form's own action, for a Send pressed before chat-compare.js has loaded
    (the page sends over each column's socket; a form without a method would have put the
    prompt in a GET URL). Nothing is sent from here: the page comes back with the prompt in
    its box and says so, as a conversation's does (apps/chat/views.py::conversation_send)."""
    comparison = get_object_or_404(_visible(request), pk=pk)
    if comparison.user_id != request.user.pk:
        raise PermissionDenied
    messages.warning(request, NOT_SENT_YET)
    return _compare_page(
        request, comparison, draft=request.POST.get("content", "")[:MAX_DRAFT_CHARS]
    )


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def compare_settings(request: HttpRequest, pk: int) -> HttpResponse:
    comparison = get_object_or_404(_visible(request), pk=pk)
    if comparison.user_id != request.user.pk:
        raise PermissionDenied
    form = CompareSettingsForm(request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        messages.error(request, f"Settings not saved: {errors}")
        return redirect(comparison)
    comparison.columns.update(**form.cleaned_data)
    messages.success(request, "Settings saved for every column; they apply to the next answer.")
    return redirect(comparison)


@require_POST
@permission_required(USE_CHAT, raise_exception=True)
def compare_vote(request: HttpRequest, pk: int) -> JsonResponse:
    """Mark the better answer of one turn: `winner` is a column letter or `tie`. Voting
    again on the same turn changes the vote."""
    comparison = get_object_or_404(_visible(request), pk=pk)
    if comparison.user_id != request.user.pk:
        return JsonResponse({"error": "only who asked may vote on these answers"}, status=403)
    columns = list(comparison.columns.select_related("recipe").order_by("column"))
    turn = form_id(request.POST.get("turn"))
    if turn is None:
        return JsonResponse({"error": "say which turn (1, 2, …)"}, status=400)
    winner_raw = (request.POST.get("winner") or "").strip().upper()
    letters = SIDES[: len(columns)]
    if winner_raw == "TIE":
        winner = None
    elif len(winner_raw) == 1 and winner_raw in letters:
        winner = letters.index(winner_raw)
    else:
        return JsonResponse({"error": f"winner must be one of {', '.join(letters)} or tie"},
                            status=400)  # fmt: skip
    answered = _answered_turns(columns)
    if not 1 <= turn <= answered:
        return JsonResponse({"error": f"turn {turn} has no answers in every column yet"},
                            status=400)  # fmt: skip
    prompt = (
        columns[0].messages.filter(role=Message.Role.USER).order_by("created_at", "pk")
        .values_list("content", flat=True)[turn - 1]
    )  # fmt: skip
    vote, _ = ArenaVote.objects.update_or_create(
        comparison=comparison, turn=turn,
        defaults={"user": request.user, "winner_column": winner,
                  "recipes": [c.recipe_id for c in columns], "prompt": prompt[:200]},
    )  # fmt: skip
    return JsonResponse({"turn": vote.turn, "winner": winner_raw.lower() if winner is None
                         else letters[winner]})  # fmt: skip


def _answered_turns(columns: list[Conversation]) -> int:
    """Turns every column has finished answering (the votable ones)."""
    counts = []
    for conv in columns:
        counts.append(
            conv.messages.filter(role=Message.Role.ASSISTANT)
            .exclude(status=Message.Status.STREAMING)
            .count()
        )
    return min(counts) if counts else 0


@require_GET
def arena_page(request: HttpRequest) -> HttpResponse:
    recent = ArenaVote.objects.select_related("user", "comparison").order_by("-pk")[:20]
    return render(request, "chat/arena.html", {"pairs": arena.table(), "recent": recent})
