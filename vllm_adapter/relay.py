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

__all__ = ["BodyError", "Budget", "StreamTap", "TapError", "request_body", "whole_usage"]

# A chunk that carries generated text (chat delta content or reasoning, or completion
# text): not the role-only first chat chunk, not the usage chunk.
_TOKEN_BEARING = re.compile(rb'"(?:content|text|reasoning_content|reasoning|delta)":"[^"]')
_EVENT_END = b"\n\n"


class BodyError(ValueError):
    """The client's body is not something to relay (message for the client)."""


def request_body(
    payload: dict[str, Any],
    *,
    served_name: str,
    stream: bool,
    max_tokens_cap: int | None,
    responses: bool = False,
) -> tuple[bytes, bool]:
    """The upstream body, and whether the client asked for the usage chunk itself. A
    Responses API request (`responses`) streams its usage in its last event anyway (no
    stream_options), and its limit is max_output_tokens."""
    payload["model"] = served_name
    client_wants_usage = False
    if responses:
        if max_tokens_cap is not None:
            asked = payload.get("max_output_tokens")
            if not (isinstance(asked, int) and not isinstance(asked, bool)
                    and asked <= max_tokens_cap):  # fmt: skip
                payload["max_output_tokens"] = max_tokens_cap
        return json.dumps(payload, separators=(",", ":")).encode(), True
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


class TapError(Exception):
    """A streamed answer the relay will not pass on (the server misbehaves, or the process
    holds too much already). ``kind``: ``oversized_event`` (one event past its bound),
    ``too_many_events`` (more events than the answer can have tokens), ``too_long`` (more
    bytes than any answer), ``busy`` (the process-wide buffer budget is spent)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Budget:
    """Bytes a process holds for answers not yet passed on (unfinished stream events, whole
    answers being read): one budget per process, so a few huge answers at once cannot
    balloon it. Single-threaded (one event loop): a plain counter."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held = max(0, self.held - size)


class StreamTap:
    """Feed it the body's bytes as they arrive; it returns what to forward now.

    Linear in what passes: each read is searched once for the last event end and joined
    once with the unfinished event before it (the unfinished part is a list of reads, not
    a growing bytes object searched again at every read). Bounds, each a `TapError`:
    an unfinished event over ``max_event_bytes``, more than ``max_events`` events, more
    than ``max_bytes`` in all, and the unfinished bytes taken from ``budget``."""

    __slots__ = (
        "_budget",
        "_drop_usage",
        "_parts",
        "_pending",
        "_rename",
        "done",
        "error",
        "events",
        "first_token_at",
        "max_bytes",
        "max_event_bytes",
        "max_events",
        "received",
        "token_events",
        "usage",
    )

    def __init__(
        self,
        *,
        drop_usage: bool,
        rename: tuple[bytes, bytes] | None = None,
        max_event_bytes: int = 16 << 20,
        max_events: int | None = None,
        max_bytes: int | None = None,
        budget: Budget | None = None,
    ):
        self._parts: list[bytes] = []  # the unfinished event, read by read
        self._pending = 0
        self._budget = budget
        self._drop_usage = drop_usage
        self._rename = rename  # (b'"model":"served"', b'"model":"public"') when they differ
        self.max_event_bytes = max_event_bytes
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.usage: dict | None = None
        self.first_token_at: float | None = None
        self.error: dict | None = None
        self.done = False
        self.received = 0
        self.events = 0
        # Events that carried text: what a stream cut short had generated, about (vLLM
        # sends one event per engine step, one token each at the default stream interval).
        self.token_events = 0

    def feed(self, data: bytes) -> bytes:
        if not data:
            return b""
        self.received += len(data)
        if self.max_bytes is not None and self.received > self.max_bytes:
            raise TapError("too_long", f"the answer passed {self.max_bytes} bytes")
        end = data.rfind(_EVENT_END)
        if end >= 0:
            head, rest = data[: end + 2], data[end + 2 :]
        elif self._parts and data[:1] == b"\n" and self._parts[-1][-1:] == b"\n":
            head, rest = data[:1], data[1:]  # the blank line split between two reads
        else:
            self._hold(data)
            return b""
        if self._parts:
            self._parts.append(head)
            complete = b"".join(self._parts)
            self._let_go()
        else:
            complete = head
        if rest:
            self._hold(rest)
        return self._complete(complete)

    def _hold(self, data: bytes) -> None:
        if self._budget is not None and not self._budget.take(len(data)):
            raise TapError("busy", "the panel holds too many unfinished answers right now")
        self._parts.append(data)
        self._pending += len(data)
        if self._pending > self.max_event_bytes:
            raise TapError(
                "oversized_event",
                f"an event grew past {self.max_event_bytes} bytes without its end",
            )

    def _let_go(self) -> None:
        if self._budget is not None:
            self._budget.give(self._pending)
        self._parts = []
        self._pending = 0

    def _complete(self, complete: bytes) -> bytes:
        events = complete.count(b"data: ")
        self.events += events
        if self.max_events is not None and self.events > self.max_events:
            raise TapError(
                "too_many_events",
                f"more than {self.max_events} events: more than the answer can have tokens",
            )
        if self.first_token_at is None and _TOKEN_BEARING.search(complete):
            self.first_token_at = time.monotonic()
        if self.first_token_at is not None:
            self.token_events += events
        if b'"usage":{' in complete or b'"error":' in complete or b"[DONE]" in complete:
            complete = self._inspect(complete)
        if self._rename is not None:
            complete = complete.replace(*self._rename)
        return complete

    def close(self) -> bytes:
        """What is left at the end (an unterminated last event, forwarded as it is); the
        budget it held is given back. Safe to call more than once."""
        rest = b"".join(self._parts)
        self._let_go()
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
                    inner = payload.get("response")
                    if usage is None and isinstance(inner, dict):
                        usage = inner.get("usage")  # the Responses API's response.completed
                    if isinstance(usage, dict):
                        self.usage = usage
                        if self._drop_usage and payload.get("choices") == []:
                            continue  # the chunk only the relay asked for
            kept.append(event + _EVENT_END)
        return b"".join(kept)
