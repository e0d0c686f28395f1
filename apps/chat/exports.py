"""A conversation as a file to keep: Markdown to read, JSON to process (docs/chat.md,
"Keeping conversations"). Pure formatting: the functions take a conversation and its
messages (with their runs and hosts) and touch no request and no database beyond them."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from django.utils.text import slugify

# The JSON export's schema name and version: a reader checks it before anything else.
FORMAT = "sparkpanel-chat/1"

_ROLE_HEADINGS = {"user": "You", "assistant": "Model"}
_BACKTICKS = re.compile(r"`+")


def filename(conversation, extension: str) -> str:
    """`my-first-chat.md` from the title; `conversation-12.md` for an untitled one."""
    stem = slugify(conversation.title)[:80].strip("-") or f"conversation-{conversation.pk}"
    return f"{stem}.{extension}"


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fenced(text: str, info: str = "text") -> str:
    """Text in a code fence longer than any run of backticks inside it: nothing in it can
    close the fence early, whatever the model wrote."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _number(value: float | None, places: int) -> str | None:
    return None if value is None else f"{value:.{places}f}"


def stats_line(message) -> str:
    """An answer's figures, as the page shows them: TTFT, tok/s (and its clock), tokens,
    finish reason, status and error."""
    parts = []
    if (ttft := _number(message.ttft_s, 2)) is not None:
        parts.append(f"TTFT {ttft} s")
    if message.tok_s:
        parts.append(f"{message.tok_s:.1f} tok/s")
    label = message.clock().label
    if label and (message.ttft_s is not None or message.tok_s):
        parts.append(label)
    if message.prompt_tokens is not None or message.completion_tokens is not None:
        prompt, completion = message.prompt_tokens or 0, message.completion_tokens or 0
        parts.append(f"{prompt} prompt + {completion} completion tokens")
    if message.finish_reason:
        parts.append(f"finish: {_one_line(message.finish_reason)}")
    parts.append(f"status: {message.status}")
    if message.error:
        parts.append(f"error: {_one_line(message.error)}")
    return " · ".join(parts)


def _header(conversation) -> list[str]:
    lines = [f"# {_one_line(str(conversation)) or 'Conversation'}", ""]
    if conversation.recipe_id:
        lines.append(f"- **Recipe:** {_one_line(conversation.recipe)}")
    if conversation.run_id:
        run = conversation.run
        lines.append(f"- **Run:** {run.pk} on {_one_line(run.host)}")
    lines.append(f"- **By:** {_one_line(conversation.user)}")
    lines.append(f"- **Started:** {_iso(conversation.created_at)}")
    lines += ["", "## Settings", ""]
    lines.append(f"- **Temperature:** {conversation.temperature:g}")
    lines.append(f"- **top_p:** {conversation.top_p:g}")
    lines.append(f"- **Max tokens:** {conversation.max_tokens}")
    if conversation.system_prompt:
        lines += ["- **System prompt:**", "", _fenced(conversation.system_prompt)]
    else:
        lines.append("- **System prompt:** none")
    return lines


def to_markdown(conversation, messages: Iterable) -> str:
    """The conversation as Markdown: title, recipe, run and host, settings, then each
    message under its role's heading. Contents are the model's own Markdown, verbatim;
    reasoning is fenced; each answer ends with its figures in one italic line."""
    lines = _header(conversation)
    for message in messages:
        lines += ["", "---", "", f"## {_ROLE_HEADINGS.get(message.role, message.role)}", ""]
        if message.reasoning:
            lines += ["<details><summary>Reasoning</summary>", "",
                      _fenced(message.reasoning), "", "</details>", ""]  # fmt: skip
        lines.append(message.content if message.content else "*(no text)*")
        if message.role == "assistant":
            lines += ["", f"*{stats_line(message)}*"]
    return "\n".join(lines).rstrip("\n") + "\n"


def message_dict(message) -> dict:
    return {**message.as_dict(), "run": message.run_id, "created_at": _iso(message.created_at)}


def to_json(conversation, messages: Iterable, exported_at: dt.datetime) -> dict:
    """The conversation as the `sparkpanel-chat/1` document (schema: docs/chat.md). The
    share token is never in it."""
    recipe, run = conversation.recipe, conversation.run
    if recipe is not None:
        recipe = {"id": recipe.pk, "slug": recipe.slug, "name": recipe.name}
    return {
        "format": FORMAT,
        "exported_at": _iso(exported_at),
        "id": conversation.pk,
        "title": conversation.title,
        "user": str(conversation.user),
        "recipe": recipe,
        "run": None if run is None else {"id": run.pk, "host": str(run.host)},
        "system_prompt": conversation.system_prompt,
        "temperature": conversation.temperature,
        "top_p": conversation.top_p,
        "max_tokens": conversation.max_tokens,
        "comparison": conversation.comparison_id,
        "column": conversation.column,
        "created_at": _iso(conversation.created_at),
        "updated_at": _iso(conversation.updated_at),
        "messages": [message_dict(m) for m in messages],
    }
