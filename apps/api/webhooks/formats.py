"""What a delivery looks like on the wire, by the webhook's format: SparkPanel's own signed
JSON (`generic`, the event's document as is), or a message the chat and push services
accept as they are — Slack's and Discord's incoming webhooks, Microsoft Teams' Workflows
webhook (an Adaptive Card) and ntfy (a plain-text message to a topic URL, with a title,
a priority, tags and a link). Every format carries the same one-line summary of the event
(`summary`), and the panel's signature headers, which the services ignore.
"""

from __future__ import annotations

import json

from apps.api.models import Webhook

GENERIC, SLACK, DISCORD, TEAMS, NTFY = "generic", "slack", "discord", "teams", "ntfy"
# The formats and their labels, as the model declares them (one list, one migration).
CHOICES = list(Webhook._meta.get_field("format").choices)
DISCORD_MAX = 2000  # Discord refuses longer content
TEXT_MAX = 3000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def summary(event: str, payload: dict) -> tuple[str, str, str]:
    """(title, one line, link) for a person reading a chat or a phone."""
    if event == "job.finished":
        job = payload.get("job") or {}
        line = (f"Benchmark job {job.get('id')} ({job.get('suite')}) of {job.get('recipe')} "
                f"on {job.get('host')}: {job.get('state')}")  # fmt: skip
        if payload.get("summary"):
            line += f" — {payload['summary']}"
        if job.get("error"):
            line += f" — {job['error']}"
        return f"Benchmark job {job.get('id')} {job.get('state')}", line, job.get("url") or ""
    if event == "incident":
        incident = payload.get("incident") or {}
        kind = incident.get("kind")
        title = {"act": "Run stopped by the memory watchdog", "warn": "Memory low",
                 "hang": "Run hung", "alert": "Telemetry alert"}.get(kind, "Incident")  # fmt: skip
        line = f"{incident.get('host')}: {incident.get('message')}"
        if incident.get("action"):
            line += f" — {incident['action']}"
        return f"{title} on {incident.get('host')}", line, incident.get("url") or ""
    if event in ("run.failed", "run.ready"):
        run = payload.get("run") or {}
        head = f"Run {run.get('id')} ({run.get('recipe')}) on {run.get('host')}"
        if event == "run.failed":
            line = f"{head} failed: {run.get('failure_reason') or 'no reason recorded'}"
            return f"Run {run.get('id')} failed on {run.get('host')}", line, run.get("url") or ""
        after = run.get("ready_after_s")
        line = f"{head} is ready" + (f" after {after / 60:.1f} min" if after else "")
        return f"Run {run.get('id')} ready on {run.get('host')}", line, run.get("url") or ""
    return "SparkPanel test", payload.get("message") or f"SparkPanel: {event}", ""


def _priority(event: str, payload: dict) -> str:
    if event == "run.failed":
        return "high"
    kind = (payload.get("incident") or {}).get("kind")
    return {"act": "urgent", "hang": "high", "warn": "high"}.get(kind, "default")


def render(fmt: str, event: str, payload: dict, body: bytes) -> tuple[bytes, dict[str, str]]:
    """(body, extra headers) for `fmt`; `body` is the generic signed JSON."""
    if fmt in ("", GENERIC):
        return body, {"Content-Type": "application/json"}
    title, line, link = summary(event, payload)
    text = _cut(line + (f"\n{link}" if link else ""), TEXT_MAX)
    if fmt == SLACK:
        doc = {"text": f"*{title}*\n{text}"}
    elif fmt == DISCORD:
        doc = {"content": _cut(f"**{title}**\n{text}", DISCORD_MAX), "username": "SparkPanel",
               "allowed_mentions": {"parse": []}}  # fmt: skip
    elif fmt == TEAMS:
        card = {
            "type": "AdaptiveCard",
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "version": "1.4",
            "body": [
                {"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium",
                 "wrap": True},
                {"type": "TextBlock", "text": _cut(line, TEXT_MAX), "wrap": True},
            ],
        }  # fmt: skip
        if link:
            card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in SparkPanel",
                                "url": link}]  # fmt: skip
        attachment = {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        doc = {"type": "message", "attachments": [attachment]}
    elif fmt == NTFY:
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            # ntfy reads these as UTF-8 only when RFC 2047-encoded; keep them ASCII
            "Title": title.encode("ascii", "replace").decode(),
            "Priority": _priority(event, payload),
            "Tags": "sparkpanel," + event.replace(".", "-"),
        }
        if link:
            headers["Click"] = link
        return _cut(line, TEXT_MAX).encode(), headers
    else:
        raise ValueError(f"unknown webhook format {fmt!r}")
    return json.dumps(doc, ensure_ascii=False).encode(), {"Content-Type": "application/json"}
