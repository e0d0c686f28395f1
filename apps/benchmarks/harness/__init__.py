"""A closed-loop load generator for an OpenAI-compatible vLLM server (SPEC §5 metrics).

Pure asyncio + httpx, no Django: the benchmark app's tasks call `run_level` and store
`LevelResult.to_dict()`. What it sends and how it reads the answers come from the panel's
vLLM adapter: paths and bodies from `vllm_adapter.endpoints`, the SSE decoding from
`vllm_adapter.sse`, the server metrics' names from `vllm_adapter.metric_names`.

How a level runs
----------------
`LevelSpec(scenario, concurrency, requests, warmup)` is a **closed loop**: `concurrency`
workers each send a request, read its stream to the end, and send the next one. With
`arrivals=Arrivals(rate, …)` the measured requests are an **open loop** instead: each is
sent at its due time from the level's start (arrivals.py), at most the cap in flight,
whatever the answers do; the level stops sending once its backlog grows without bound
(`LevelResult.saturated`), and `LevelResult.arrival` records the requested and achieved
rate and how late the sends were. The warm-up stays a closed loop.

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
how late it wakes (event-loop lag); with schedule lag they show a client that fell behind
(`client_lagged` when loop lag p99 > 5 ms; `client_flag` gives the word the results pages
and the exports use: "client lag" with more than one stream, "busy machine" at one, where
the client has almost nothing to do and the lag says the machine was busy). A lagging
client reads chunks in bursts, dated alike: `itl_from_bursts` says when a level's ITL
figures are those bursts rather than the server's pace.

Too short to time: a level whose requests generate fewer than DECODE_MIN_TOKENS tokens, or
whose median first-to-last-token time is under DECODE_MIN_WALL_S of wall clock, has
`decode_timed` False (`decode_too_short`): its decode rate is noise, not a rate.

The measured window also runs with the garbage collector's existing objects frozen
(`gc.freeze`, without a collection first: that costs ~0.15 s in a worker), so a full
collection of a large host process cannot pause the loop mid-measurement.

Client overhead (measured in docs/BENCHMARKS.md against sparksim's /sparksim/trace): the
shared `httpx.AsyncClient` runs on `_Transport` — httpx's own transport over a flat
connection pool (httpcore's pool costs O(connections) with a poll() per idle connection on
every request start and end: seconds of send delay at 64 streams) and, for plain HTTP, an
asyncio-native network backend that dates reads by the kernel's receive time on Linux
(SO_TIMESTAMPNS, `_KernelStamped`), else by when the loop hands their bytes over; a level's
`diagnostics["receive_stamps"]` says which. Streamed requests go straight to that
transport (`Client.open_stream`). The event loop matters where the loop's stamps are used:
uvloop roughly halves their error at 64 streams.

Where each part lives
---------------------
- `types.py`: what goes in and comes out (`Scenario`, `LevelSpec`, `SLO`,
  `RequestResult`, `LevelResult`, `PromptLengthError`) and a level's bounds
  (`level_refusal`, `MAX_PROMPT_TOKENS`, `MAX_OUTPUT_TOKENS`, `MAX_LEVEL_PROMPT_TOKENS`).
- `stats.py`: the numbers — per request (`stream_metrics`), per level (`_aggregate`),
  the client's self-diagnostics (`_diagnostics`, `client_flag`, `itl_from_bursts`),
  `percentiles`, `summarize`, and "too short to time" (`decode_too_short`, `decode_seconds`).
- `stream.py`: reading one streamed answer (`StreamParser`, `tokens_in_chunk`) on top of
  `vllm_adapter.sse`'s decoder.
- `transport.py`: the HTTP/1.1 transport, connection pool and timestamping network
  backend (`_Transport`, `_FlatPool`, `_AsyncioBackend`, `_Stream`, `_Protocol`, and
  `_KernelStamped`, the transport that reads with the kernel's receive times).
- `client.py`: `Client`, the shared httpx client (model discovery, `open_stream`,
  `count_chat_tokens`).
- `prompts.py`: exact-length prompts (`build_messages`) and the serialised bodies
  (`build_payloads`).
- `metrics.py`: the /metrics cross-check (`parse_metrics`, `scrape_metrics`,
  `_server_delta`).
- `arrivals.py`: open-loop levels — when each request is due (`Arrivals`, `offsets`:
  constant, Poisson, gamma with burstiness, ramp-up; seeded) and when a level has stopped
  keeping up (`Saturation`).
- `levels.py`: running a level (`run_level`, `_open_phase`, `_one_request`,
  `_finish_request`, `_tick`).

This package re-exports the public names; the benchmark app imports them from here.
"""

from apps.benchmarks.harness.client import CHAT_PATH, Client
from apps.benchmarks.harness.levels import TICK_S, run_level
from apps.benchmarks.harness.metrics import (
    COUNTERS,
    GAUGES,
    HISTOGRAMS,
    ServerSampler,
    parse_metrics,
    scrape_metrics,
)
from apps.benchmarks.harness.prompts import (
    FILLER_CACHE_WORDS,
    PROMPT_BUILD_PARALLEL,
    build_messages,
)
from apps.benchmarks.harness.stats import (
    CLIENT_BUSY,
    CLIENT_LAG,
    CLIENT_OK,
    DECODE_MIN_TOKENS,
    DECODE_MIN_WALL_S,
    DEFAULT_PERCENTILES,
    ITL_BURST_RATIO,
    SATURATION_LAG_MS,
    client_flag,
    client_lagged,
    decode_seconds,
    decode_too_short,
    itl_from_bursts,
    percentiles,
    stream_metrics,
    summarize,
)
from apps.benchmarks.harness.stats import _diagnostics as _diagnostics  # read by the tests
from apps.benchmarks.harness.stream import StreamParser, tokens_in_chunk
from apps.benchmarks.harness.types import (
    ERROR_TEXT_MAX,
    MAX_LEVEL_PROMPT_TOKENS,
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    SLO,
    LevelResult,
    LevelSpec,
    PromptLengthError,
    RequestResult,
    Scenario,
    level_refusal,
)
from vllm_adapter.sse import StreamError

__all__ = [
    "CHAT_PATH",
    "CLIENT_BUSY",
    "CLIENT_LAG",
    "CLIENT_OK",
    "COUNTERS",
    "DECODE_MIN_TOKENS",
    "DECODE_MIN_WALL_S",
    "DEFAULT_PERCENTILES",
    "ERROR_TEXT_MAX",
    "FILLER_CACHE_WORDS",
    "GAUGES",
    "HISTOGRAMS",
    "ITL_BURST_RATIO",
    "MAX_LEVEL_PROMPT_TOKENS",
    "MAX_OUTPUT_TOKENS",
    "MAX_PROMPT_TOKENS",
    "PROMPT_BUILD_PARALLEL",
    "SATURATION_LAG_MS",
    "SLO",
    "TICK_S",
    "Client",
    "LevelResult",
    "LevelSpec",
    "PromptLengthError",
    "RequestResult",
    "Scenario",
    "ServerSampler",
    "StreamError",
    "StreamParser",
    "build_messages",
    "client_flag",
    "client_lagged",
    "decode_seconds",
    "decode_too_short",
    "itl_from_bursts",
    "level_refusal",
    "parse_metrics",
    "percentiles",
    "run_level",
    "scrape_metrics",
    "stream_metrics",
    "summarize",
    "tokens_in_chunk",
]
