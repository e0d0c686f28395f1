"""Reading one streamed chat completion: which chunks carry generated tokens, how many,
and when their bytes arrived (`StreamParser`, `tokens_in_chunk`). The SSE decoding and
the chunk fields are `vllm_adapter.sse`'s (one SSE implementation for the whole panel);
this keeps only what the timing needs."""

from __future__ import annotations

import time

from vllm_adapter import sse


def tokens_in_chunk(chunk: dict, previous_usage: dict | None) -> int:
    """Generated tokens one streamed chunk carries.

    With `continuous_usage_stats` every chunk has the running `usage.completion_tokens`,
    and a chunk carries the difference from the previous chunk's (several tokens when the
    server batched them into one chunk; 0 for the role-only chunk, the finish chunk and
    the final usage-only chunk). A usage-only chunk (`choices: []`) never carries tokens.
    Without usage, a chunk with non-empty content/reasoning/text counts as one token.
    """
    choices = chunk.get("choices") or ()
    if not choices:
        return 0
    usage = chunk.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        before = (previous_usage or {}).get("completion_tokens") or 0
        return max(int(usage["completion_tokens"]) - before, 0)
    return 1 if any(map(sse.has_text, choices)) else 0


class StreamParser:
    """Reads a streamed chat completion: the events come from `vllm_adapter.sse`'s
    decoder and parser (one SSE implementation for the whole panel); this keeps, for
    every token-bearing chunk, the time its bytes were received and its token count.
    `feed` raises `StreamError` on a malformed event, an oversized one or an error
    event."""

    __slots__ = ("_decode", "_sse", "done", "finish_reason", "response_id", "text", "times",
                 "tokens", "usage")  # fmt: skip

    def __init__(self, keep_text: bool = False) -> None:
        # keep_text: the answer's content is kept too (a multi-turn session sends it back).
        self.text: list[str] | None = [] if keep_text else None
        self._sse = sse.Decoder()
        self._decode = self._sse.feed
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.usage: dict | None = None
        self.response_id: str | None = None
        self.finish_reason: str | None = None
        self.done = False

    def feed(self, data: bytes, now: float) -> None:
        for event in self._decode(data):
            self._chunk(event, now)

    def close(self, now: float | None = None) -> None:
        """The body ended: a last event without its blank line still counts."""
        for event in self._sse.close():
            self._chunk(event, time.monotonic() if now is None else now)

    def _chunk(self, data: bytes, now: float) -> None:
        chunk = sse.parse_data(data)
        if chunk is None:
            self.done = True
            return
        if self.response_id is None:
            self.response_id = chunk.get("id")
        n = tokens_in_chunk(chunk, self.usage)
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        if n:
            self.times.append(now)
            self.tokens.append(n)
        if self.text is not None:
            self.text.extend(sse.delta_text(c)[0] for c in chunk.get("choices") or ())
        reason = sse.finish_reason(chunk)
        if reason:
            self.finish_reason = reason
