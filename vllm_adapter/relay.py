"""What a relay in front of vLLM's OpenAI server must know about its answers, byte-cheap.

- `request_body(...)`: the client's JSON body as the server must see it: the served model
  name instead of the public one, ``stream_options.include_usage`` forced on for a streamed
  request (so the tokens are always known), and ``max_tokens`` capped when a token budget
  allows no more.
- `StreamTap`: watches a streamed answer (``text/event-stream``) as it passes: forwards
  whole events as soon as they are complete, drops the usage chunk the client did not ask
  for, reads the usage, notes when the first token came and whether vLLM sent an error
  event. It never holds more than one incomplete event.
- `whole_usage(...)`: the usage of a non-streamed answer.

vLLM 0.32/0.33's shapes (``openai/chat_completion/serving.py``, ``completion/serving.py``):
events are ``data: <json>\\n\\n``; with ``include_usage`` the last event before
``data: [DONE]`` is ``{"id", "object", "created", "model", "choices": [], "usage": {...}}``;
the first chat event carries only ``"delta": {"role": "assistant", "content": ""}``; an
engine failure mid-stream is a ``data: {"error": {...}}`` event. No Django.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

__all__ = ["BodyError", "StreamTap", "request_body", "whole_usage"]

# A chunk that carries generated text (chat delta content or reasoning, or completion
# text): not the role-only first chat chunk, not the usage chunk.
_TOKEN_BEARING = re.compile(rb'"(?:content|text|reasoning_content|reasoning)":"[^"]')
_EVENT_END = b"\n\n"


class BodyError(ValueError):
    """The client's body is not something to relay (message for the client)."""


def request_body(
    payload: dict[str, Any],
    *,
    served_name: str,
    stream: bool,
    max_tokens_cap: int | None,
) -> tuple[bytes, bool]:
    """The upstream body, and whether the client asked for the usage chunk itself."""
    payload["model"] = served_name
    client_wants_usage = False
    if stream:
        options = payload.get("stream_options")
        if options is None:
            options = {}
        elif not isinstance(options, dict):
            raise BodyError("'stream_options' must be an object")
        client_wants_usage = options.get("include_usage") is True
        payload["stream_options"] = {**options, "include_usage": True}
    if max_tokens_cap is not None:
        for field in ("max_tokens", "max_completion_tokens"):
            asked = payload.get(field)
            if isinstance(asked, int) and not isinstance(asked, bool) and asked <= max_tokens_cap:
                continue
            if field == "max_tokens" or field in payload:
                payload[field] = max_tokens_cap
    return json.dumps(payload, separators=(",", ":")).encode(), client_wants_usage


def whole_usage(body: bytes) -> dict | None:
    try:
        usage = json.loads(body).get("usage")
    except (ValueError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


class StreamTap:
    """Feed it the body's bytes as they arrive; it returns what to forward now."""

    __slots__ = (
        "_buffer",
        "_drop_usage",
        "_rename",
        "done",
        "error",
        "first_token_at",
        "token_events",
        "usage",
    )

    def __init__(self, *, drop_usage: bool, rename: tuple[bytes, bytes] | None = None):
        self._buffer = b""
        self._drop_usage = drop_usage
        self._rename = rename  # (b'"model":"served"', b'"model":"public"') when they differ
        self.usage: dict | None = None
        self.first_token_at: float | None = None
        self.error: dict | None = None
        self.done = False
        # Events that carried text: what a stream cut short had generated, about (vLLM
        # sends one event per engine step, one token each at the default stream interval).
        self.token_events = 0

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        end = buffer.rfind(_EVENT_END)
        if end < 0:
            self._buffer = buffer
            return b""
        complete, self._buffer = buffer[: end + 2], buffer[end + 2 :]
        if self.first_token_at is None and _TOKEN_BEARING.search(complete):
            self.first_token_at = time.monotonic()
        if self.first_token_at is not None:
            self.token_events += complete.count(b"data: ")
        if b'"usage":{' in complete or b'"error":' in complete or b"[DONE]" in complete:
            complete = self._inspect(complete)
        if self._rename is not None:
            complete = complete.replace(*self._rename)
        return complete

    def close(self) -> bytes:
        """What is left at the end (an unterminated last event, forwarded as it is)."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _inspect(self, complete: bytes) -> bytes:
        kept: list[bytes] = []
        for event in complete.split(_EVENT_END):
            if not event:
                continue
            if event.startswith(b"data: [DONE]"):
                self.done = True
            elif b'"usage":{' in event or b'"error":' in event:
                try:
                    payload = json.loads(event[event.index(b"{") :])
                except ValueError:
                    payload = None
                if isinstance(payload, dict):
                    if isinstance(payload.get("error"), dict):
                        self.error = payload["error"]
                    usage = payload.get("usage")
                    if isinstance(usage, dict):
                        self.usage = usage
                        if self._drop_usage and payload.get("choices") == []:
                            continue  # the chunk only the relay asked for
            kept.append(event + _EVENT_END)
        return b"".join(kept)
