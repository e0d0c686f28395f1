"""/sparksim/trace's store: when the server wrote each token-bearing SSE chunk of the
streamed requests (ground truth for load generators), kept in compact arrays."""

from __future__ import annotations

import array
import collections
import itertools
import time

TRACE_LIMIT = 10_000  # streamed requests whose chunk times /sparksim/trace keeps...
TRACE_CHUNKS_MAX = 4_000_000  # ...and chunks in all (12 bytes each: ~48 MB at most)
TRACE_IDS_MAX = 1_000  # ids per /sparksim/trace?ids=... query


class Trace:
    """When the server wrote each token-bearing SSE chunk of one streamed request.

    Times are `time.monotonic()` taken right after the chunk was handed to the transport
    (CLOCK_MONOTONIC is system-wide on Linux, so a client on the same machine can compare
    its own receive times with them), with the number of tokens in each chunk; compact
    arrays, since a long benchmark streams millions of chunks. `started_at` is when the
    response began (the request parsed and queued).
    """

    __slots__ = ("started_at", "times", "tokens")

    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.times = array.array("d")
        self.tokens = array.array("I")

    def to_dict(self, request_id: str) -> dict:
        times = self.times
        return {
            "id": request_id,
            "started_at": self.started_at,
            "chunks": [[t, n] for t, n in zip(times, self.tokens, strict=True)],
            "first_token_at": times[0] if times else None,
            "last_token_at": times[-1] if times else None,
        }


class TraceStore:
    """The traces of the last `limit` streamed requests, by response id; the oldest are
    dropped first, also while more than `max_chunks` chunks are stored in all."""

    def __init__(self, limit: int = TRACE_LIMIT, max_chunks: int = TRACE_CHUNKS_MAX):
        self.limit = limit
        self.max_chunks = max_chunks
        self.chunks = 0
        self._traces: collections.OrderedDict[str, Trace] = collections.OrderedDict()

    def start(self, request_id: str) -> Trace:
        traces = self._traces
        while traces and (len(traces) >= self.limit or self.chunks > self.max_chunks):
            _, old = traces.popitem(last=False)
            self.chunks -= len(old.times)
        trace = traces[request_id] = Trace()
        return trace

    def add(self, trace: Trace, tokens: int) -> None:
        """One token-bearing chunk of `trace` has just been written."""
        trace.times.append(time.monotonic())
        trace.tokens.append(tokens)
        self.chunks += 1

    def get(self, request_id: str) -> Trace | None:
        return self._traces.get(request_id)

    def recent(self, n: int) -> list[str]:
        """The ids of the newest `n` traces, oldest first (in the order the responses began)."""
        newest = itertools.islice(reversed(self._traces), max(n, 0))
        return list(newest)[::-1]

    def __len__(self) -> int:
        return len(self._traces)
