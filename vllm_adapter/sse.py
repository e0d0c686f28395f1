"""Server-sent events as vLLM's OpenAI-compatible server streams them, and the fields the
panel reads from each chunk. Pure Python, no I/O: the callers keep their own HTTP clients.

What vLLM sends (``vllm/entrypoints/openai/chat_completion/serving.py`` and
``completion/serving.py``, 0.32 and 0.33): one ``data: <json>\\n\\n`` event per chunk,
then ``data: [DONE]\\n\\n``. A request that fails after its 200 was sent (the engine
died, a generation error) gets one error chunk, ``data: {"error": {"message", "type",
"param", "code"}}``, and still the ``[DONE]``. Chunks:

- chat: ``{"id", "object": "chat.completion.chunk", "created", "model", "choices":
  [{"index", "delta": {"role"?, "content"?, "reasoning"?}, "finish_reason", ...}],
  "usage"?}``; the reasoning text is ``delta.reasoning`` since vLLM 0.11 and was
  ``delta.reasoning_content`` before (both are read);
- completions: ``choices: [{"index", "text", "finish_reason", ...}]``;
- with ``stream_options.include_usage`` a last chunk with ``choices: []`` and the
  ``usage``; with ``continuous_usage_stats`` every chunk carries its running usage.

Layers, so the benchmark harness can keep its hot path lean:

- ``Decoder``: bytes in, the ``data`` of each complete event out. Handles ``\\n``,
  ``\\r\\n`` and ``\\r`` line ends (also split between two reads), comments (``: ping``),
  other fields (``event:``, ``id:``, ``retry:``), several ``data:`` lines in one event
  (joined with ``\\n``, as the SSE standard says), events split across reads, and a
  bounded buffer (``StreamError("oversized_event")`` past ``max_event_bytes``).
- ``parse_data``: one event's data to the chunk (``None`` for ``[DONE]``); a non-JSON
  event or the error chunk raise ``StreamError``.
- field helpers: ``delta_text``, ``has_text``, ``finish_reason``, ``usage``,
  ``error_message``.
- ``encode`` / ``DONE_EVENT``: the same framing written (for servers and tests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vllm_adapter.endpoints import error_message

__all__ = [
    "DONE",
    "DONE_EVENT",
    "MAX_EVENT_BYTES",
    "REASONING_KEYS",
    "Decoder",
    "StreamError",
    "delta_text",
    "encode",
    "error_message",
    "finish_reason",
    "has_text",
    "parse_data",
    "usage",
]

DONE = b"[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"
# An event that grows past this without its blank line is not a chat chunk (the panel
# asks for no logprobs; a chunk is well under a kilobyte): a broken or hostile server.
MAX_EVENT_BYTES = 1 << 20
# The delta's reasoning text: vLLM ≥ 0.11 sends "reasoning", older "reasoning_content".
REASONING_KEYS = ("reasoning", "reasoning_content")


class StreamError(Exception):
    """A stream that cannot be read on. ``kind``: ``malformed_sse`` (an event that is
    not a JSON object), ``oversized_event`` (past the decoder's bound) or
    ``stream_error`` (the server's error chunk; the message is the server's)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Decoder:
    """An incremental SSE decoder: ``feed(bytes)`` returns the data of the events that
    completed, in order; ``close()`` returns a last event that ended without its blank
    line (a browser's EventSource drops it; the panel would rather count the chunk, and
    a cut one fails to parse in ``parse_data``). Events without a ``data`` field
    (comments, keep-alives) are not returned."""

    __slots__ = ("_buf", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> Sequence[bytes]:
        buf = self._buf
        if buf:
            buf += data
        elif data.endswith(b"\n\n") and data.find(b"\n") == len(data) - 2:
            # The common read: exactly one one-line "data: {...}" event, as vLLM writes
            # each chunk. (A JSON text has no raw \r; any other \r is a line end.)
            if data.startswith(b"data: ") and b"\r" not in data:
                return [data[6:-2]]
            buf = data
        else:
            buf = data
        held = b""
        if b"\r" in buf:
            if buf[-1:] == b"\r":  # maybe the first half of a \r\n: decide on the next read
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        find = buf.find
        end = find(b"\n\n")
        if end < 0:  # a read in the middle of an event
            if held:
                buf += held
            if len(buf) > self.max_event_bytes:
                self._overflow()
            self._buf = buf
            return ()
        out: list[bytes] = []
        start = 0
        while end >= 0:
            event = buf[start:end]
            start = end + 2
            # The one-line "data: {...}" event vLLM sends, without a split or a copy more.
            if event.startswith(b"data: ") and b"\n" not in event:
                out.append(event[6:])
            elif event:
                value = _data_of(event)
                if value is not None:
                    out.append(value)
            end = find(b"\n\n", start)
        rest = buf[start:] + held if held else buf[start:]
        if len(rest) > self.max_event_bytes:
            self._overflow()
        self._buf = rest
        return out

    def _overflow(self) -> None:
        self._buf = b""
        raise StreamError(
            "oversized_event", f"an event grew past {self.max_event_bytes} bytes without its end"
        )

    def close(self) -> list[bytes]:
        rest, self._buf = self._buf, b""
        rest = rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n").strip(b"\n")
        value = _data_of(rest) if rest else None
        return [] if value is None else [value]


def _data_of(event: bytes) -> bytes | None:
    """The data of one event (its lines, without the blank line), or None without any."""
    values = []
    for line in event.split(b"\n"):
        if line[:4] != b"data":
            continue  # comments (": ping"), event:, id:, retry:, blank lines
        if len(line) == 4:
            values.append(b"")  # "data" alone: an empty data line
        elif line[4:5] == b":":
            values.append(line[6:] if line[5:6] == b" " else line[5:])
    return b"\n".join(values) if values else None


def parse_data(data: bytes) -> dict | None:
    """One event's data as a chunk (a JSON object); None for ``[DONE]``.

    Raises ``StreamError``: ``malformed_sse`` for data that is not a JSON object,
    ``stream_error`` for the error chunk (``{"error": {...}}`` without choices, the way
    vLLM reports a request that failed mid-stream), with the server's message."""
    if data == DONE:
        return None
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        if data.strip() == DONE:
            return None
        raise StreamError("malformed_sse", f"not JSON: {data[:80]!r} ({exc})") from None
    if not isinstance(chunk, dict):
        raise StreamError("malformed_sse", f"not a JSON object: {data[:80]!r}")
    if "error" in chunk and not chunk.get("choices"):
        raise StreamError("stream_error", error_message(chunk))
    return chunk


# --- the fields of a chunk -------------------------------------------------------------


def delta_text(choice: dict) -> tuple[str, str]:
    """``(content, reasoning)`` of one choice: a chat delta's ``content`` and its
    reasoning (either key), or a completion choice's ``text`` (no reasoning)."""
    delta = choice.get("delta")
    if delta is None:
        return choice.get("text") or "", ""
    return (
        delta.get("content") or "",
        delta.get("reasoning") or delta.get("reasoning_content") or "",
    )


def has_text(choice: dict) -> bool:
    """Whether one choice carries generated text (content, reasoning or text): the
    role-only first chunk and the finish chunk do not."""
    delta = choice.get("delta")
    if delta is None:
        return bool(choice.get("text"))
    return bool(delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content"))


def finish_reason(chunk: dict) -> str | None:
    """The last non-empty ``finish_reason`` among the chunk's choices."""
    reason = None
    for choice in chunk.get("choices") or ():
        if choice.get("finish_reason"):
            reason = choice["finish_reason"]
    return reason


def usage(chunk: dict) -> dict | None:
    """The chunk's ``usage`` (``prompt_tokens``, ``completion_tokens``, ...), if any."""
    return chunk.get("usage") or None


def encode(chunk: Any) -> bytes:
    """One ``data:`` event, JSON without spaces as vLLM's pydantic ``model_dump_json``
    writes it."""
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
