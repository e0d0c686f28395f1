"""A closed-loop load generator for an OpenAI-compatible vLLM server (SPEC §5 metrics).

Pure asyncio + httpx, no Django: the benchmark app's tasks call `run_level` and store
`LevelResult.to_dict()`. What it sends and how it reads the answers come from the panel's
vLLM adapter: paths and bodies from `vllm_adapter.endpoints`, the SSE decoding from
`vllm_adapter.sse`, the server metrics' names from `vllm_adapter.metric_names`.

How a level runs
----------------
`LevelSpec(scenario, concurrency, requests, warmup)` is a **closed loop**: `concurrency`
workers each send a request, read its stream to the end, and send the next one.

1. Prompts are built before anything is sent (`build_messages`): chat messages whose
   chat-templated length, counted by the server's own `POST /tokenize`, is exactly
   `scenario.prompt_tokens`. Each request starts with a unique salt and also sends it as
   `cache_salt`, so prefill is cold; with `warm_prefix=True` every request sends the same
   prompt and no `cache_salt`, so the warm-up fills the prefix cache and the measured
   requests hit it. Bodies are serialised up front, so the measured window does no JSON
   encoding and no /tokenize calls.
2. Warm-up: the first `warmup` requests (at least `concurrency`, which also covers the
   first-request JIT compile) run the same closed loop and are excluded from every
   aggregate; the level waits for all of them to finish.
3. `/metrics` is scraped, then the measured requests run; the **steady-state window** is
   from the first measured send to the last measured completion. `/metrics` is scraped
   again after the last one, so the server-side deltas cover exactly the measured requests
   (as long as nobody else uses the server meanwhile).

Per request (`RequestResult`), from `time.monotonic()`:
- `ready_at`: the worker is ready to send; `sent_at`: the request body has been handed to
  the socket; `schedule_lag_ms` = sent_at − ready_at (pool, connect, and the client's
  own event-loop delay). A chunk's receive time is when the event loop handed its bytes
  over (the connection's protocol callback), not when a task got round to parsing them.
  (Plain HTTP only; over TLS, httpcore's trace hook gives sent_at and chunks are stamped
  when parsed.)
- TTFT: sent_at → the first SSE chunk carrying generated tokens (content or reasoning;
  not the role-only chunk). E2E: sent_at → the last token-bearing chunk (not `[DONE]`).
- Token counts come from the server's `usage` (`continuous_usage_stats` gives every chunk
  its running `completion_tokens`; a chunk carries the delta). Without usage a chunk with
  text counts as one token. Output and prompt tokens are the final `usage` values.
- TPOT = (E2E − TTFT) / (output_tokens − 1); decode tok/s = 1 / TPOT; prefill tok/s =
  prompt_tokens / TTFT; ITL = each gap between consecutive token-bearing chunks divided
  by the tokens of the later chunk, listed once per token (so mean ITL = TPOT whenever
  the first chunk carries one token).
- Failures (HTTP status, timeouts, broken or malformed streams, error events) are recorded
  on the request with a category (`error_kind`); `run_level` never raises for them.

`time_scale`: pass sparksim's `--time-scale` when the simulated host runs N× faster than
real time. Every reported duration is then wall seconds × time_scale (simulated seconds)
and every rate is per simulated second (wall rate ÷ time_scale). Raw `*_at` timestamps and
the client's self-diagnostics (loop lag, schedule lag, `overhead_wall_ms`) stay in wall
time: they describe the client. Server metrics are taken as the server reports them:
sparksim's `/metrics` already count simulated seconds (its clock is wall × time scale),
and a real vLLM runs at time_scale 1, so they are never rescaled.

Self-diagnostics: a ticker task wakes every 5 ms during the measured window and records
how late it wakes (event-loop lag); with schedule lag they show a saturated client
(`client_saturated` when loop lag p99 > 5 ms with more than one stream; at one stream the
client has almost nothing to do, so the same lag says the machine was busy: `busy_machine`;
`client_flag` gives the word the results pages show).

Too short to time: a level whose requests generate fewer than DECODE_MIN_TOKENS tokens, or
whose median first-to-last-token time is under DECODE_MIN_WALL_S of wall clock, has
`decode_timed` False (`decode_too_short`): its decode rate is noise, not a rate.

The measured window also runs with the garbage collector's existing objects frozen
(`gc.freeze`), so a full collection of a large host process cannot pause the loop
mid-measurement.

Client overhead (measured in docs/BENCHMARKS.md against sparksim's /sparksim/trace): the
shared `httpx.AsyncClient` runs on `_Transport` — httpx's own transport over a flat
connection pool (httpcore's pool costs O(connections) with a poll() per idle connection on
every request start and end: seconds of send delay at 64 streams) and, for plain HTTP, an
asyncio-native network backend that stamps reads as they arrive. Streamed requests go
straight to that transport (`Client.open_stream`). The event loop matters: uvloop roughly
halves the timestamp error of plain asyncio at 64 streams.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import hashlib
import itertools
import json
import logging
import math
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields

import httpcore
import httpx

from vllm_adapter import endpoints, metric_names, sse
from vllm_adapter.endpoints import error_message as _error_text
from vllm_adapter.metrics import totals
from vllm_adapter.sse import StreamError

log = logging.getLogger("sparkpanel.benchmarks")

CHAT_PATH = endpoints.CHAT_COMPLETIONS
DEFAULT_PERCENTILES = (50, 90, 99)
TICK_S = 0.005  # event-loop lag ticker period
SATURATION_LAG_MS = 5.0  # loop lag p99 above this: the client, not the server, is the limit
# A decode rate needs enough tokens and enough time to be a rate: below either bound the
# gap between the first and the last token is scheduling and transport noise.
DECODE_MIN_TOKENS = 16  # generated tokens per request
DECODE_MIN_WALL_S = 0.020  # wall-clock seconds from the first to the last token
PROMPT_BUILD_PARALLEL = 8
# Bounds on what a level may build, whatever a suite says (suites are validated against
# them, and against the recipe's max_model_len, before a job is queued): no context vLLM
# serves on a Spark holds more than a million tokens, and the prompts a level keeps ready
# (one per request unless the prefix is warm) stay around a hundred MB.
MAX_PROMPT_TOKENS = 1_000_000
MAX_OUTPUT_TOKENS = 100_000
MAX_LEVEL_PROMPT_TOKENS = 16_000_000
# The filler words are drawn once, up to this many; longer prompts repeat them. (Held for
# the life of the process: what a 50-million-token prompt once drew must not stay.)
FILLER_CACHE_WORDS = 16_384
ERROR_TEXT_MAX = endpoints.ERROR_TEXT_MAX
_READ_BUFFER_MAX = 1 << 20  # bytes a connection buffers before it stops reading

# --- public data -------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    prompt_tokens: int
    output_tokens: int

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("a scenario needs at least one prompt and one output token")


@dataclass
class LevelSpec:
    """One closed-loop level. `warmup` is raised to `concurrency` when lower."""

    scenario: Scenario
    concurrency: int
    requests: int
    warmup: int
    warm_prefix: bool = False

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.requests < 1:
            raise ValueError("concurrency and requests must be at least 1")
        self.warmup = max(int(self.warmup), self.concurrency)


@dataclass
class SLO:
    """Goodput bounds, in (simulated) seconds."""

    ttft_s: float
    tpot_s: float


@dataclass
class RequestResult:
    """One request. `*_at` are raw `time.monotonic()` wall times; durations are seconds
    × time_scale; `chunk_times`/`chunk_tokens` are the raw receive times and token counts
    of the token-bearing chunks (kept for ground-truth checks, left out of `to_dict`)."""

    index: int
    warmup: bool
    intended_prompt_tokens: int
    intended_output_tokens: int
    ok: bool = False
    error_kind: str | None = None
    error: str | None = None
    status: int | None = None
    response_id: str | None = None
    ready_at: float | None = None
    sent_at: float | None = None
    first_byte_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    end_at: float | None = None
    schedule_lag_ms: float | None = None
    ttft: float | None = None
    e2e: float | None = None
    tpot: float | None = None
    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    prompt_mismatch: bool = False
    output_mismatch: bool = False
    itl: list[float] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)

    def fail(self, kind: str, message: str) -> None:
        if self.error_kind is None:  # the first failure is the cause
            self.ok = False
            self.error_kind, self.error = kind, message[:ERROR_TEXT_MAX]

    def compact(self) -> dict:
        return {
            "ttft": _round(self.ttft),
            "e2e": _round(self.e2e),
            "tpot": _round(self.tpot),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "ok": self.ok,
            "error": None if self.ok else f"{self.error_kind}: {self.error}",
        }

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("chunk_times")
        out.pop("chunk_tokens")
        return out


@dataclass
class LevelResult:
    spec: LevelSpec
    slo: SLO | None
    time_scale: float
    started: float  # wall-clock time.time() of the start
    error: str | None = None  # the level could not run at all (e.g. prompts not buildable)
    stopped: bool = False  # should_stop() ended it early
    sent: int = 0  # measured requests sent
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    prompt_mismatches: int = 0
    output_mismatches: int = 0
    window_s: float | None = None
    request_throughput: float | None = None  # ok requests / s
    output_throughput: float | None = None  # output tok/s
    total_throughput: float | None = None  # (prompt + output) tok/s
    ttft: dict = field(default_factory=dict)
    e2e: dict = field(default_factory=dict)
    tpot: dict = field(default_factory=dict)
    itl: dict = field(default_factory=dict)
    decode_tok_s: dict = field(default_factory=dict)
    prefill_tok_s: dict = field(default_factory=dict)
    goodput: float | None = None  # requests / s meeting the SLO
    goodput_fraction: float | None = None  # of the requests sent
    decode_timed: bool = True  # False: too short to time (see decode_too_short)
    diagnostics: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)  # compact, one per measured request
    details: list[RequestResult] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        """JSON-ready, without `details` (the full per-request records)."""
        out = {}
        for f in fields(self):
            if f.name == "details":
                continue
            value = getattr(self, f.name)
            out[f.name] = asdict(value) if hasattr(value, "__dataclass_fields__") else value
        return out


class PromptLengthError(ValueError):
    """No prompt of exactly the requested chat-templated length could be built."""


def level_refusal(spec: LevelSpec, max_model_len: int | None = None) -> str | None:
    """Why this level must not run (None: it may): a prompt or answer beyond the absolute
    bounds, prompt + answer beyond the served context (vLLM refuses every such request),
    or more prompt tokens than a level keeps in memory."""
    scenario = spec.scenario
    prompt, output = scenario.prompt_tokens, scenario.output_tokens
    if prompt > MAX_PROMPT_TOKENS:
        return f"{prompt:,} prompt tokens: a prompt has at most {MAX_PROMPT_TOKENS:,}."
    if output > MAX_OUTPUT_TOKENS:
        return f"{output:,} generated tokens: an answer has at most {MAX_OUTPUT_TOKENS:,}."
    if max_model_len is not None and prompt + output > max_model_len:
        return (
            f"{prompt:,} prompt + {output:,} generated tokens is more than the recipe's "
            f"max_model_len ({max_model_len:,}): the server would refuse every request."
        )
    held = prompt * (1 if spec.warm_prefix else spec.warmup + spec.requests)
    if held > MAX_LEVEL_PROMPT_TOKENS:
        return (
            f"{spec.warmup + spec.requests:,} requests of {prompt:,} prompt tokens are "
            f"{held:,} prompt tokens to hold; a level holds at most "
            f"{MAX_LEVEL_PROMPT_TOKENS:,} (fewer requests, shorter prompts or a warm prefix)."
        )
    return None


# --- what a measurement can say --------------------------------------------------------------


def decode_too_short(
    output_tokens: int | None, decode_s: float | None, time_scale: float = 1.0
) -> bool:
    """True when a decode rate from these numbers would be noise, not a rate: fewer than
    DECODE_MIN_TOKENS generated tokens, or less than DECODE_MIN_WALL_S of wall-clock decode
    (`decode_s`, the first to the last token in reported seconds, is wall × time_scale).
    An unknown duration with enough tokens is not "too short" (nothing says it is). The one
    threshold for the results pages, the charts, the capacity answer, the exports and the
    CLI's decode check."""
    if output_tokens is None or output_tokens < DECODE_MIN_TOKENS:
        return True
    if decode_s is None:
        return False
    return decode_s / (time_scale if time_scale and time_scale > 0 else 1.0) < DECODE_MIN_WALL_S


def decode_seconds(output_tokens: int | None, decode_tok_s: float | None) -> float | None:
    """First to last token, from a decode rate: (output tokens − 1) / decode tok/s."""
    if not output_tokens or output_tokens < 2 or not decode_tok_s or decode_tok_s <= 0:
        return None
    return (output_tokens - 1) / decode_tok_s


CLIENT_OK, CLIENT_SATURATED, CLIENT_BUSY = "ok", "saturated", "busy machine"


def client_flag(diagnostics: dict | None, concurrency: int) -> str:
    """What the load generator's event-loop lag says about a level. More than one stream
    with lag p99 over the threshold: "saturated" (the client's own load may have inflated
    the latencies). At one stream the client has next to nothing to do, so the same lag
    means the machine it ran on was busy with something else: "busy machine"."""
    diagnostics = diagnostics or {}
    lagged = diagnostics.get("client_lagged")
    if lagged is None:  # results stored before the flag was split
        lagged = diagnostics.get("client_saturated") or diagnostics.get("busy_machine")
    if not lagged:
        return CLIENT_OK
    return CLIENT_BUSY if concurrency <= 1 else CLIENT_SATURATED


# --- statistics ----------------------------------------------------------------------------


def percentiles(values: Iterable[float], ps: Sequence[float] = DEFAULT_PERCENTILES) -> dict:
    """`{"p50": ..., ...}` by linear interpolation between closest ranks (numpy's default:
    rank = p/100 × (n − 1)). None and NaN are ignored; an empty input gives None."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    out: dict[str, float | None] = {}
    for p in ps:
        if not 0 <= p <= 100:
            raise ValueError(f"percentile out of range: {p}")
        key = f"p{p:g}"
        if not xs:
            out[key] = None
            continue
        rank = (len(xs) - 1) * p / 100
        lo = math.floor(rank)
        hi = min(lo + 1, len(xs) - 1)
        out[key] = xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)
    return out


def summarize(values: Iterable[float], scale: float = 1.0) -> dict:
    """n, mean, p50/p90/p99, min, max of the values × scale."""
    xs = [v * scale for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None,
                "max": None}  # fmt: skip
    return {"n": len(xs), "mean": sum(xs) / len(xs), **percentiles(xs), "min": min(xs),
            "max": max(xs)}  # fmt: skip


# --- SSE stream parsing ---------------------------------------------------------------------


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

    __slots__ = ("_decode", "_sse", "done", "finish_reason", "response_id", "times", "tokens",
                 "usage")  # fmt: skip

    def __init__(self) -> None:
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
        reason = sse.finish_reason(chunk)
        if reason:
            self.finish_reason = reason


def stream_metrics(
    sent_at: float,
    times: Sequence[float],
    tokens: Sequence[int],
    output_tokens: int,
    prompt_tokens: int | None,
    time_scale: float = 1.0,
) -> dict:
    """SPEC §5 per-request metrics from the token-bearing chunks' receive times (scaled)."""
    if not times:
        return {"ttft": None, "e2e": None, "tpot": None, "decode_tok_s": None,
                "prefill_tok_s": None, "itl": []}  # fmt: skip
    ttft = (times[0] - sent_at) * time_scale
    e2e = (times[-1] - sent_at) * time_scale
    tpot = (e2e - ttft) / (output_tokens - 1) if output_tokens > 1 else None
    itl = []
    for i in range(1, len(times)):
        per_token = (times[i] - times[i - 1]) * time_scale / tokens[i]
        itl.extend([per_token] * tokens[i])
    return {
        "ttft": ttft,
        "e2e": e2e,
        "tpot": tpot,
        "decode_tok_s": 1 / tpot if tpot else None,
        "prefill_tok_s": prompt_tokens / ttft if prompt_tokens and ttft > 0 else None,
        "itl": itl,
    }


# --- the client ----------------------------------------------------------------------------


class _Protocol(asyncio.Protocol):
    """Receives a connection's bytes and stamps each read with `time.monotonic()` the
    moment the event loop hands them over (before any task runs on them)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[tuple[float, bytes]] = collections.deque()
        self.buffered = 0
        self.eof = False
        self.error: BaseException | None = None
        self.read_waiter: asyncio.Future | None = None
        self.drain_waiter: asyncio.Future | None = None
        self.reading_paused = False
        self.writing_paused = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.monotonic(), data))
        self.buffered += len(data)
        if self.buffered > _READ_BUFFER_MAX and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake("read_waiter")

    def eof_received(self) -> bool:
        self.eof = True
        self._wake("read_waiter")
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.error = exc
        self._wake("read_waiter")
        self._wake("drain_waiter")

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake("drain_waiter")

    def _wake(self, name: str) -> None:
        waiter = getattr(self, name)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Stream(httpcore.AsyncNetworkStream):
    """An httpcore network stream on a plain asyncio transport. `last_read_at` is when
    the bytes the last `read()` returned arrived; `last_write_at` is when the last
    `write()` began handing its bytes to the kernel (or the transport's buffer)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol):
        self._transport, self._protocol = transport, protocol
        self.last_read_at: float | None = None
        self.last_write_at: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.chunks:
            if p.eof:
                return self._at_eof()
            p.read_waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:  # streams: no read timeout, and no timer per read
                    await p.read_waiter
                else:
                    async with asyncio.timeout(timeout):
                        await p.read_waiter
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out reading from the server") from None
            finally:
                p.read_waiter = None
            if not p.chunks:
                return self._at_eof()
        at, data = p.chunks.popleft()
        if len(data) > max_bytes:
            p.chunks.appendleft((at, data[max_bytes:]))
            data = data[:max_bytes]
        p.buffered -= len(data)
        if p.reading_paused and p.buffered < _READ_BUFFER_MAX // 2:
            p.reading_paused = False
            self._transport.resume_reading()
        self.last_read_at = at
        return data

    def _at_eof(self) -> bytes:
        error = self._protocol.error
        if error is not None:
            raise httpcore.ReadError(f"{type(error).__name__}: {error}")
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.error is not None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        # Stamped before the write: the send syscall wakes the server, which may preempt this
        # process on a busy core; a stamp taken after could then be later than the answer.
        at = time.monotonic()
        self._transport.write(buffer)
        self.last_write_at = at
        if p.writing_paused:
            p.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await p.drain_waiter
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing to the server") from None
            finally:
                p.drain_waiter = None
            if p.error is not None:
                raise httpcore.WriteError(f"{type(p.error).__name__}: {p.error}")

    async def aclose(self) -> None:
        self._transport.close()

    def get_extra_info(self, info: str):
        if info == "is_readable":  # httpcore: has an idle connection been closed or sent to?
            return bool(self._protocol.chunks) or self._protocol.eof
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Plain-HTTP connections straight on the asyncio loop (no anyio layers per read and
    write), with receive times taken in the protocol callback, when the loop hands the
    bytes over, rather than when a task gets round to them: at 64 streams that cut the
    TTFT timestamp error p99 from ~8 ms to ~3 ms here (docs/BENCHMARKS.md)."""

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None) -> _Stream:  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port,
                    local_addr=(local_address, 0) if local_address else None,
                )  # fmt: skip
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}:{port}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise NotImplementedError("unix sockets are not supported")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _FlatPool:
    """A connection pool with O(1) work per request, LIFO reuse, one request per
    connection (HTTP/1.1), for `_Transport`.

    httpcore's AsyncConnectionPool re-scans every connection whenever a request starts or
    a response closes (a poll() per idle connection, and a quadratic count of idle ones):
    measured here, at 64 closed-loop streams that alone delayed sends by seconds and the
    client's event loop by tens of milliseconds.
    """

    def __init__(self, max_connections: int, keepalive_expiry: float | None, ssl_context):
        self._idle: dict[tuple, list[httpcore.AsyncHTTPConnection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._backend = _AsyncioBackend()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        timeout = (request.extensions.get("timeout") or {}).get("pool")
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise httpcore.PoolTimeout("no free connection within the pool timeout") from None
        origin = request.url.origin
        try:
            for attempt in range(3):
                connection = await self._checkout(origin, fresh=attempt > 0)
                try:
                    response = await connection.handle_async_request(request)
                except httpcore.ConnectionNotAvailable:
                    await connection.aclose()
                    continue
                except BaseException:
                    await connection.aclose()
                    raise
                break
            else:
                raise httpcore.ConnectError("no usable connection")
        except BaseException:
            self._slots.release()
            raise
        stream = _ReleasingStream(response.stream, lambda: self._release(origin, connection))
        return httpcore.Response(status=response.status, headers=response.headers,
                                 content=stream, extensions=response.extensions)  # fmt: skip

    async def _checkout(self, origin: httpcore.Origin, fresh: bool):
        idle = self._idle.get(_origin_key(origin))
        while idle and not fresh:
            connection = idle.pop()
            if connection.is_available() and not connection.has_expired():
                return connection
            await connection.aclose()
        return httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            # TLS goes through httpcore's default (anyio) backend.
            network_backend=self._backend if origin.scheme == b"http" else None,
        )

    def _release(self, origin: httpcore.Origin, connection) -> None:
        self._slots.release()
        if connection.is_idle():
            self._idle.setdefault(_origin_key(origin), []).append(connection)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def __aenter__(self) -> _FlatPool:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _origin_key(origin: httpcore.Origin) -> tuple:
    return origin.scheme, origin.host, origin.port


class _ReleasingStream:
    """A response body that hands its connection back to the pool once closed."""

    def __init__(self, stream, release: Callable[[], None]):
        self._stream, self._release = stream, release

    def __aiter__(self):
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            release()


class _Transport(httpx.AsyncHTTPTransport):
    """httpx's own transport (request/response mapping, exception mapping) over `_FlatPool`."""

    def __init__(self, limits: httpx.Limits):
        # No super().__init__(): all it does is build httpcore's pool (and an SSL context,
        # 40 ms); httpcore makes its default SSL context itself when https needs one.
        self._pool = _FlatPool(limits.max_connections or 1024, limits.keepalive_expiry, None)


class Client:
    """One shared `httpx.AsyncClient` to a vLLM base URL (e.g. http://127.0.0.1:8000).

    Connection limits sit far above any concurrency the harness runs (httpx's default of
    100 would queue requests client-side), and the transport's pool is `_FlatPool` (O(1)
    per request) instead of httpcore's; connect timeout 10 s, no read timeout on streams,
    and a total per-request timeout (`request_timeout`) enforced by the harness.
    Proxy variables from the environment are ignored (`trust_env=False`): the servers are
    on the LAN.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        max_connections: int = 1024,
        request_timeout: float = 1800.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=60,
        )
        timeout = httpx.Timeout(connect=connect_timeout, read=None, write=60.0, pool=None)
        self._transport = transport or _Transport(limits)
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            limits=limits,
            timeout=timeout,
            trust_env=False,
            transport=self._transport,
        )
        self._chat_url = httpx.URL(self.base_url + CHAT_PATH)
        # Plain HTTP on the default transport: connections stamp their own reads/writes.
        self.stamped = transport is None and self._chat_url.scheme == "http"
        self._stream_headers = {**endpoints.STREAM_HEADERS, **headers}
        self._timeouts = timeout.as_dict()
        # n_tokens -> (filler words, tail words) that hit n exactly last time
        self._templates: dict[int, tuple[int, tuple[str, ...]]] = {}

    @classmethod
    async def create(cls, base_url: str, model: str | None = None, **kwargs) -> Client:
        """A client; with `model=None` the served model's name comes from /v1/models."""
        client = cls(base_url, model or "", **kwargs)
        if model is None:
            try:
                client.model = await client.discover_model()
            except BaseException:
                await client.aclose()
                raise
        return client

    async def discover_model(self) -> str:
        response = await self.http.get(endpoints.MODELS, timeout=10)
        response.raise_for_status()
        ids = endpoints.model_ids(response.json())
        if not ids:
            raise RuntimeError(f"{self.base_url}{endpoints.MODELS} lists no model")
        return ids[0]

    async def open_stream(self, payload: bytes, trace=None) -> httpx.Response:
        """POST a serialised chat-completions body and return the response with its body
        unread. It goes straight to the shared client's transport (the same connection
        pool): AsyncClient.send's per-request machinery (URL merging, cookies, auth and
        redirect handling) costs about half a millisecond of CPU per request, which at
        64 streams delays everything else the loop is timing."""
        extensions = {"timeout": self._timeouts}
        if trace is not None:
            extensions["trace"] = trace
        request = httpx.Request("POST", self._chat_url, content=payload,
                                headers=self._stream_headers, extensions=extensions)  # fmt: skip
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def count_chat_tokens(self, messages: list[dict]) -> int:
        """The chat-templated length of `messages`, by the server's own tokenizer."""
        response = await self.http.post(
            endpoints.TOKENIZE, json=endpoints.tokenize_chat_body(self.model, messages),
            timeout=60,
        )  # fmt: skip
        if response.status_code != 200:
            raise RuntimeError(
                f"POST {endpoints.TOKENIZE} answered HTTP {response.status_code}: "
                f"{_error_text(response.content)}"
            )
        return endpoints.token_count(response.json())

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


# --- exact-length prompts --------------------------------------------------------------------

# Common English words that are one token (with and without a leading space) in the usual
# BPE vocabularies and in sparksim's; the salt and the filler are made of them, so each
# added word adds exactly one token and the length search converges in one or two rounds.
_WORD_TEXT = """
the of and to in is it for on with as at by from that this be are was or an not but all can
one more time use each new model token memory speed data load work step part test code rate
user team file line page word note case plan task goal path node port unit size type form
list rule core cache batch queue stream server client engine layer block prompt answer reply
request result value number table graph chart metric report level range scale limit window
length width height depth weight power energy light sound water river lake ocean wind rain
snow cloud storm fire stone sand rock tree leaf root seed flower garden field farm forest
mountain valley hill road bridge train car ship boat harbor coast island city town village
house room door wall floor chair bed kitchen bread milk cheese rice soup fruit apple tea
coffee sugar salt oil egg fish bird dog cat horse sheep cow bee song music book story paper
letter name place world country state nation history art film game sport ball player market
price money bank office shop store service system process program project product study
science method theory idea reason example fact point question problem lesson class school
student teacher friend family child people person group company government law spring summer
autumn winter morning evening night day week month year hour minute second moment first last
next early late small large long short high low fast slow hot cold warm cool dry wet green
blue red white black gray brown golden silver quiet loud soft hard clear simple good great
old young open close start stop read write build make take give find keep send show move
turn help look walk talk play run
"""
_WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))
_PAD_WORDS = ("a", "the", "of", "to", "and", "in", "is", "it", "on", "at")
_filler: list[str] = []  # at most FILLER_CACHE_WORDS, drawn 4,096 at a time


def _filler_words(n: int) -> list[str]:
    """The first `n` filler words: always the same words for the same `n`, and each prefix
    of a longer filler (the length search relies on both)."""
    while len(_filler) < min(n, FILLER_CACHE_WORDS):
        rng = random.Random(len(_filler) * 7919 + 17)  # noqa: S311 - text, not secrets
        _filler.extend(rng.choice(_WORDS) for _ in range(4096))
    if n <= len(_filler):
        return _filler[:n]
    return list(itertools.islice(itertools.cycle(_filler), n))


def _salt_text(salt: str) -> str:
    digest = hashlib.blake2b(salt.encode(), digest_size=8).digest()
    return "Request " + " ".join(_WORDS[b % len(_WORDS)] for b in digest) + "."


def _prompt(head: str, k: int, tail: Sequence[str] = ()) -> list[dict]:
    words = [*_filler_words(k), *tail]
    return [{"role": "user", "content": head + (" " + " ".join(words) if words else "")}]


async def build_messages(client: Client, n_tokens: int, salt: str) -> list[dict]:
    """Chat messages whose chat-templated length (the server's `POST /tokenize` with
    `add_generation_prompt`) is exactly `n_tokens`: a unique opening made from `salt`, then
    filler words. The filler length that worked for `n_tokens` is remembered on the client,
    so later salts usually cost one /tokenize round-trip (a check). Raises
    PromptLengthError when no exact length is found."""
    if n_tokens < 1:
        raise PromptLengthError("a prompt needs at least one token")
    if n_tokens > MAX_PROMPT_TOKENS:
        raise PromptLengthError(
            f"{n_tokens:,} prompt tokens: a prompt has at most {MAX_PROMPT_TOKENS:,}"
        )
    head = _salt_text(salt)
    counts: dict[tuple[int, tuple[str, ...]], int] = {}

    async def count(k: int, tail: tuple[str, ...] = ()) -> int:
        if (k, tail) not in counts:
            counts[k, tail] = await client.count_chat_tokens(_prompt(head, k, tail))
        return counts[k, tail]

    def done(k: int, tail: tuple[str, ...] = ()) -> list[dict]:
        client._templates[n_tokens] = (k, tail)
        return _prompt(head, k, tail)

    known = client._templates.get(n_tokens)
    if known is not None:
        k, tail = known
        got = await count(k, tail)
        if got == n_tokens:
            return done(k, tail)
        k = max(k + n_tokens - got, 0)
    else:
        base = await count(0)
        if base > n_tokens:
            raise PromptLengthError(
                f"{n_tokens} prompt tokens is shorter than the chat template and the salt "
                f"({base} tokens)"
            )
        k = n_tokens - base
    # Newton steps at ~one token per word...
    for _ in range(6):
        got = await count(k)
        if got == n_tokens:
            return done(k)
        k_next = max(k + n_tokens - got, 0)
        if (k_next, ()) in counts:
            break
        k = k_next
    # ...then bisection between the longest filler below and the shortest above...
    below = [k for (k, t), v in counts.items() if not t and v < n_tokens]
    above = [k for (k, t), v in counts.items() if not t and v > n_tokens]
    lo = max(below, default=0)
    hi = min(above, default=lo + 64)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        got = await count(mid)
        if got == n_tokens:
            return done(mid)
        lo, hi = (mid, hi) if got < n_tokens else (lo, mid)
    # ...then, where one more word adds two tokens, short words one token at a time.
    tail: tuple[str, ...] = ()
    current = await count(lo)
    while current < n_tokens and len(tail) < 16:
        for word in _PAD_WORDS:
            got = await count(lo, (*tail, word))
            if got == n_tokens:
                return done(lo, (*tail, word))
            if got == current + 1:
                tail, current = (*tail, word), got
                break
        else:
            break
    raise PromptLengthError(
        f"could not build a prompt of exactly {n_tokens} tokens (closest: "
        f"{sorted(counts.values(), key=lambda v: abs(v - n_tokens))[0]})"
    )


# --- server metrics ----------------------------------------------------------------------------

# The server-side cross-check's families, from the one table of vLLM metric names.
HISTOGRAMS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.HISTOGRAM)
COUNTERS = metric_names.read_by(metric_names.BENCHMARKS, metric_names.COUNTER)


def parse_metrics(text: str) -> dict:
    """`{"ttft": {"sum", "count", "metric"}, ..., "prompt_tokens": n, ...}` from Prometheus
    text, summed over label sets (engines); older names are read when the current one is
    absent (ITL's pre-0.11 name). Raises ValueError on text that does not parse."""
    return totals(text, metric_names.BENCHMARKS)


async def scrape_metrics(client: Client) -> dict:
    """GET /metrics and parse the histograms and counters the cross-check needs."""
    response = await client.http.get(endpoints.METRICS, timeout=10)
    response.raise_for_status()
    return parse_metrics(response.text)


def _server_delta(before: dict, after: dict, client_ttft_mean: float | None, scale: float):
    out: dict = {"ok": True}
    for key in HISTOGRAMS:
        if key in before and key in after:
            n = after[key]["count"] - before[key]["count"]
            s = after[key]["sum"] - before[key]["sum"]
            out[f"mean_{key}_s"] = s / n if n > 0 else None
            if key == "e2e":
                out["requests"] = n
        else:
            out[f"mean_{key}_s"] = None
    for key in COUNTERS:
        out[key] = after[key] - before[key] if key in before and key in after else None
    server_ttft = out.get("mean_ttft_s")
    if client_ttft_mean is not None and server_ttft is not None:
        out["overhead_ms"] = (client_ttft_mean - server_ttft) * 1000
        out["overhead_wall_ms"] = out["overhead_ms"] / scale
    else:
        out["overhead_ms"] = out["overhead_wall_ms"] = None
    return out


# --- running a level ------------------------------------------------------------------------


async def run_level(
    client: Client,
    spec: LevelSpec,
    slo: SLO | None = None,
    *,
    time_scale: float = 1.0,
    on_progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> LevelResult:
    """Run one closed-loop level (see the module docstring). Request failures are recorded
    per request; a level that cannot start (prompts not buildable, server unreachable)
    comes back with `error` set. `on_progress(done, total)` counts finished requests,
    warm-up included (total = warmup + requests); `should_stop()` is checked before every
    send and ends the level early (in-flight requests finish)."""
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    if spec.concurrency > client.max_connections:
        raise ValueError(
            f"concurrency {spec.concurrency} exceeds the client's {client.max_connections} "
            "connections"
        )
    result = LevelResult(spec=spec, slo=slo, time_scale=time_scale, started=time.time())
    total = spec.warmup + spec.requests
    refusal = level_refusal(spec)
    if refusal is not None:  # before a single prompt is built
        result.error = f"could not prepare the prompts: {refusal}"
        return result
    try:
        payloads = await _payloads(client, spec, total)
    except (PromptLengthError, RuntimeError, httpx.HTTPError, KeyError, ValueError) as exc:
        result.error = f"could not prepare the prompts: {type(exc).__name__}: {exc}"
        return result
    scenario = spec.scenario
    results: list[RequestResult | None] = [None] * total
    state = {"done": 0, "stopped": False}

    async def phase(indices: range, warmup: bool) -> None:
        queue = iter(indices)

        async def worker() -> None:
            for index in queue:
                if should_stop is not None and _call(should_stop):
                    state["stopped"] = True
                    return
                results[index] = await _one_request(
                    client, payloads[index], index, warmup, scenario, time_scale
                )
                state["done"] += 1
                if on_progress is not None:
                    _call(on_progress, state["done"], total)

        await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, len(indices)))))

    await phase(range(spec.warmup), warmup=True)
    before, before_error = await _try_scrape(client)
    lags: list[float] = []
    gc.collect()
    gc.freeze()
    ticker = asyncio.create_task(_tick(lags))
    try:
        if not state["stopped"]:
            await phase(range(spec.warmup, total), warmup=False)
    finally:
        gc.unfreeze()
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    after, after_error = await _try_scrape(client)
    result.stopped = state["stopped"]
    measured = [r for r in results[spec.warmup :] if r is not None]
    _aggregate(result, measured, slo, time_scale)
    result.diagnostics = _diagnostics(lags, measured, spec.concurrency)
    if before is None or after is None:
        result.server = {"ok": False, "error": before_error or after_error}
    else:
        result.server = _server_delta(before, after, result.ttft.get("mean"), time_scale)
    return result


async def _payloads(client: Client, spec: LevelSpec, total: int) -> list[bytes]:
    scenario = spec.scenario
    base = uuid.uuid4().hex[:12]

    def body(messages: list[dict], salt: str | None = None) -> bytes:
        return json.dumps(endpoints.chat_body(
            client.model, messages, max_tokens=scenario.output_tokens, stream=True,
            continuous_usage=True, min_tokens=scenario.output_tokens, ignore_eos=True,
            temperature=0, cache_salt=salt,
        )).encode()  # fmt: skip

    if spec.warm_prefix:
        return [body(await build_messages(client, scenario.prompt_tokens, base))] * total
    gate = asyncio.Semaphore(PROMPT_BUILD_PARALLEL)

    async def one(i: int) -> bytes:
        salt = f"{base}-{i}"
        async with gate:
            messages = await build_messages(client, scenario.prompt_tokens, salt)
        return body(messages, salt)

    # The first one alone finds the template; the rest reuse it.
    first = await one(0)
    return [first, *await asyncio.gather(*(one(i) for i in range(1, total)))]


async def _one_request(
    client: Client, payload: bytes, index: int, warmup: bool, scenario: Scenario, scale: float
) -> RequestResult:
    r = RequestResult(index=index, warmup=warmup, intended_prompt_tokens=scenario.prompt_tokens,
                      intended_output_tokens=scenario.output_tokens)  # fmt: skip
    parser = StreamParser()
    monotonic = time.monotonic
    sent: list[float] = []

    async def trace(name: str, info: dict) -> None:
        if name == "http11.send_request_body.complete":
            sent.append(monotonic())

    r.ready_at = monotonic()
    try:
        async with asyncio.timeout(client.request_timeout):
            response = await client.open_stream(payload, None if client.stamped else trace)
            try:
                # On plain HTTP the connection itself knows when bytes went and came.
                net = response.extensions.get("network_stream")
                if isinstance(net, _Stream) and net.last_write_at is not None:
                    sent.append(net.last_write_at)
                else:
                    net = None
                r.first_byte_at = net.last_read_at if net is not None else monotonic()
                r.status = response.status_code
                if response.status_code != 200:
                    text = _error_text(await response.aread())
                    r.fail(f"http_{response.status_code}", f"HTTP {response.status_code}: {text}")
                else:
                    encoded = response.headers.get("content-encoding", "identity") != "identity"
                    body = response.aiter_bytes() if encoded else response.stream
                    async for data in body:
                        parser.feed(data, net.last_read_at if net is not None else monotonic())
                    parser.close(net.last_read_at if net is not None else None)
            finally:
                await response.aclose()
    except StreamError as exc:
        r.fail(exc.kind, str(exc))
    except TimeoutError:
        r.fail("timeout", f"no complete answer within {client.request_timeout:g} s")
    except httpx.TimeoutException as exc:
        r.fail("timeout", f"{type(exc).__name__}: {exc}")
    except httpx.ConnectError as exc:
        r.fail("connect", f"{type(exc).__name__}: {exc}")
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        r.fail("stream_broken", f"{type(exc).__name__}: {exc}")
    except httpx.HTTPError as exc:
        r.fail("http_error", f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # recorded per request, never raised
        r.fail("client_error", f"{type(exc).__name__}: {exc}")
    r.end_at = monotonic()
    _finish_request(r, parser, sent[0] if sent else r.ready_at, scale)
    return r


def _finish_request(r: RequestResult, parser: StreamParser, sent_at: float, scale: float) -> None:
    r.sent_at = sent_at
    r.schedule_lag_ms = (sent_at - r.ready_at) * 1000 if r.ready_at is not None else None
    r.response_id = parser.response_id
    r.finish_reason = parser.finish_reason
    r.chunk_times, r.chunk_tokens = parser.times, parser.tokens
    usage = parser.usage or {}
    r.prompt_tokens = usage.get("prompt_tokens")
    r.output_tokens = usage.get("completion_tokens", sum(parser.tokens) if parser.tokens else None)
    if parser.times:
        r.first_token_at, r.last_token_at = parser.times[0], parser.times[-1]
        metrics = stream_metrics(sent_at, parser.times, parser.tokens, r.output_tokens or 0,
                                 r.prompt_tokens, scale)  # fmt: skip
        for key, value in metrics.items():
            setattr(r, key, value)
    if r.error_kind is None:
        if not parser.times:
            r.fail("no_tokens", "the stream carried no generated tokens")
        elif not parser.done:
            r.fail("stream_incomplete", "the stream ended without data: [DONE]")
        else:
            r.ok = True
    r.prompt_mismatch = r.prompt_tokens is not None and r.prompt_tokens != r.intended_prompt_tokens
    r.output_mismatch = r.ok and r.output_tokens != r.intended_output_tokens


def _aggregate(res: LevelResult, measured: list[RequestResult], slo: SLO | None, scale: float):
    ok = [r for r in measured if r.ok]
    res.sent, res.ok, res.failed = len(measured), len(ok), len(measured) - len(ok)
    for r in measured:
        if not r.ok:
            res.errors[r.error_kind] = res.errors.get(r.error_kind, 0) + 1
    res.prompt_mismatches = sum(r.prompt_mismatch for r in measured)
    res.output_mismatches = sum(r.output_mismatch for r in measured)
    res.requests = [r.compact() for r in measured]
    res.details = measured
    res.ttft = summarize(r.ttft for r in ok)
    res.e2e = summarize(r.e2e for r in ok)
    res.tpot = summarize(r.tpot for r in ok)
    res.itl = summarize(x for r in ok for x in r.itl)
    res.decode_tok_s = summarize(r.decode_tok_s for r in ok)
    res.prefill_tok_s = summarize(r.prefill_tok_s for r in ok)
    decode_s = percentiles(
        (r.e2e - r.ttft for r in ok if r.e2e is not None and r.ttft is not None), (50,)
    )["p50"]
    res.decode_timed = not decode_too_short(res.spec.scenario.output_tokens, decode_s, scale)
    starts = [r.sent_at for r in measured if r.sent_at is not None]
    ends = [r.end_at for r in measured if r.end_at is not None]
    if not starts or not ends or max(ends) <= min(starts):
        return
    window = (max(ends) - min(starts)) * scale
    res.window_s = window
    res.request_throughput = len(ok) / window
    output = sum(r.output_tokens or 0 for r in ok)
    res.output_throughput = output / window
    res.total_throughput = (output + sum(r.prompt_tokens or 0 for r in ok)) / window
    if slo is not None:
        good = sum(
            1 for r in ok if r.ttft <= slo.ttft_s and (r.tpot is None or r.tpot <= slo.tpot_s)
        )
        res.goodput = good / window
        res.goodput_fraction = good / len(measured) if measured else None


def _diagnostics(lags: list[float], measured: list[RequestResult], concurrency: int) -> dict:
    loop = percentiles([x * 1000 for x in lags], (50, 99))
    lagged = loop["p99"] is not None and loop["p99"] > SATURATION_LAG_MS
    sched = percentiles([r.schedule_lag_ms for r in measured], (50, 99))
    loop_max = max(lags) * 1000 if lags else None
    return {
        "loop_lag_p50_ms": loop["p50"],
        "loop_lag_p99_ms": loop["p99"],
        "loop_lag_max_ms": loop_max,
        "loop_ticks": len(lags),
        "schedule_lag_p50_ms": sched["p50"],
        "schedule_lag_p99_ms": sched["p99"],
        "schedule_lag_max_ms": max(
            (r.schedule_lag_ms for r in measured if r.schedule_lag_ms is not None), default=None
        ),
        # The same lag means two things: see client_flag.
        "client_lagged": lagged,
        "client_saturated": lagged and concurrency > 1,
        "busy_machine": lagged and concurrency <= 1,
        "client_flag": client_flag({"client_lagged": lagged}, concurrency),
        "saturation_threshold_ms": SATURATION_LAG_MS,
    }


async def _tick(lags: list[float]) -> None:
    """Wake every TICK_S and record how late each wake-up is (event-loop lag)."""
    monotonic = time.monotonic
    target = monotonic() + TICK_S
    while True:
        await asyncio.sleep(max(target - monotonic(), 0))
        now = monotonic()
        lags.append(max(now - target, 0.0))
        target = now + TICK_S


async def _try_scrape(client: Client) -> tuple[dict | None, str | None]:
    try:
        return await scrape_metrics(client), None
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return None, f"/metrics: {type(exc).__name__}: {exc}"[:ERROR_TEXT_MAX]


def _call(fn: Callable, *args):
    try:
        return fn(*args)
    except Exception:  # a callback's bug must not abort the level
        log.exception("benchmark callback %r failed", fn)
        return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
