"""Searching conversations: by title or by any message's text (case-insensitive), with a
short snippet around the first match (docs/chat.md, "Search")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Greatest, Length, Lower, StrIndex, Substr
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from apps.chat.models import Message

MAX_QUERY = 200  # characters, after trimming
MAX_RESULTS = 100
CONTEXT = 60  # characters of the message shown on each side of the match


@dataclass(frozen=True)
class Query:
    text: str = ""
    error: str = ""
    shown: str = ""  # what the search box shows again after an error


def clean_query(raw: str | None) -> Query:
    """The search as typed, trimmed; an explained error (never an exception) for one that
    is too long or holds a NUL character (which no text field can hold)."""
    text = (raw or "").strip()
    shown = text.replace("\x00", "")[:MAX_QUERY]
    if len(text) > MAX_QUERY:
        error = f"Search for at most {MAX_QUERY} characters (that was {len(text)})."
        return Query(error=error, shown=shown)
    if "\x00" in text:
        return Query(error="A search cannot contain a NUL character.", shown=shown)
    return Query(text=text)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def snippet(window: str, query: str, cut_before: bool, cut_after: bool) -> SafeString:
    """The text around the match, escaped, the match in <mark>; "…" where text was cut."""
    match = re.search(re.escape(query), window, re.IGNORECASE)
    if match is None:  # the database and Python fold case differently: no highlight
        before, hit, after = "", "", window
    else:
        before, hit, after = window[: match.start()], match.group(), window[match.end() :]
    parts = ["…" if cut_before else "", escape(_collapse(before))]
    if hit:
        parts += [" " if before[-1:].isspace() else "", f"<mark>{escape(hit)}</mark>",
                  " " if after[:1].isspace() else ""]  # fmt: skip
    parts += [escape(_collapse(after)), "…" if cut_after else ""]
    return mark_safe("".join(parts))  # noqa: S308 — every piece above is escaped


def search(conversations: QuerySet, query: str) -> list:
    """The conversations (of those given) whose title or any message contains `query`,
    newest first, at most MAX_RESULTS; each with `snippet`, around the first matching
    message's match (None when only the title matched)."""
    matching = Message.objects.filter(content__icontains=query)
    first_hit = matching.filter(conversation=OuterRef("pk")).order_by("created_at", "pk")
    hits = list(
        conversations.filter(
            Q(title__icontains=query) | Exists(matching.filter(conversation=OuterRef("pk")))
        ).annotate(first_hit=Subquery(first_hit.values("pk")[:1]))[:MAX_RESULTS]
    )
    windows = {
        row["pk"]: row
        for row in Message.objects.filter(pk__in=[c.first_hit for c in hits if c.first_hit])
        .annotate(pos=StrIndex(Lower("content"), Lower(Value(query))))
        .annotate(start=Greatest(F("pos") - CONTEXT, 1), length=Length("content"))
        .annotate(window=Substr("content", F("start"), 2 * CONTEXT + len(query)))
        .values("pk", "start", "length", "window")
    }
    for conversation in hits:
        row = windows.get(conversation.first_hit)
        conversation.snippet = None
        if row is not None:
            cut_after = row["start"] - 1 + len(row["window"]) < row["length"]
            conversation.snippet = snippet(row["window"], query, row["start"] > 1, cut_after)
    return hits
