"""Running one closed-loop level (`run_level`; the package docstring says how): the
warm-up and measured phases, one streamed request (`_one_request`, where the send and
receive times are taken) and its result (`_finish_request`), the event-loop lag ticker
(`_tick`) and the callbacks' guard (`_call`). The numbers themselves are stats.py's."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable

import httpx

from apps.benchmarks.harness.arrivals import Saturation
from apps.benchmarks.harness.arrivals import offsets as arrival_offsets
from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.metrics import ServerSampler, _server_delta, _try_scrape
from apps.benchmarks.harness.prompts import build_payloads, dataset_payloads, request_body
from apps.benchmarks.harness.sessions import Openings, build_openings, run_sessions
from apps.benchmarks.harness.stats import _aggregate, _diagnostics, percentiles, stream_metrics
from apps.benchmarks.harness.stream import StreamParser
from apps.benchmarks.harness.transport import _Stream
from apps.benchmarks.harness.types import (
    COMPLETIONS,
    SLO,
    LevelResult,
    LevelSpec,
    PromptLengthError,
    RequestResult,
    level_refusal,
    request_lengths,
)
from vllm_adapter.endpoints import error_message as _error_text
from vllm_adapter.sse import StreamError

log = logging.getLogger("sparkpanel.benchmarks")

TICK_S = 0.005  # event-loop lag ticker period


async def run_level(
    client: Client,
    spec: LevelSpec,
    slo: SLO | None = None,
    *,
    time_scale: float = 1.0,
    on_progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> LevelResult:
    """Run one level, closed or open loop (the package docstring). Request failures are
    recorded per request; a level that cannot start (prompts not buildable, server unreachable)
    comes back with `error` set. `on_progress(done, total)` counts finished requests,
    warm-up included (total = warmup + requests); `should_stop()` is checked before every
    send and ends the level early (in-flight requests finish)."""
    _check_caller(client, spec, time_scale)
    result = LevelResult(spec=spec, slo=slo, time_scale=time_scale, started=time.time())
    total = spec.warmup + spec.requests
    prepared = await _prepare(client, spec, total, result)
    if prepared is None:
        return result
    lengths, payloads, openings = prepared
    completions = spec.endpoint == COMPLETIONS
    results: list[RequestResult | None] = [None] * total
    state = {"done": 0, "stopped": False}

    def stop_now() -> bool:
        return should_stop is not None and bool(_call(should_stop))

    async def phase(indices: range, warmup: bool) -> None:
        queue = iter(indices)

        async def worker() -> None:
            for index in queue:
                if should_stop is not None and _call(should_stop):
                    state["stopped"] = True
                    return
                results[index] = await _one_request(
                    client, payloads[index], index, warmup, lengths[index], time_scale,
                    completions,
                )  # fmt: skip
                state["done"] += 1
                if on_progress is not None:
                    _call(on_progress, state["done"], total)

        await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, len(indices)))))

    await phase(range(spec.warmup), warmup=True)
    before, before_error = await _try_scrape(client)
    lags: list[float] = []
    # Freeze what exists (no collection first: a full gc.collect() of a Celery worker's
    # heap cost ~0.15 s per level, a third of a one-request job's worker time; garbage
    # frozen here is collected after gc.unfreeze()).
    gc.freeze()
    ticker = asyncio.create_task(_tick(lags))
    sampler = ServerSampler(client)
    sampling = asyncio.create_task(sampler.run())
    try:
        if state["stopped"]:
            pass
        elif openings is not None:
            state["stopped"] = await run_sessions(
                client, spec, openings, spec.warmup, _one_request, results, time_scale,
                stop_now, lambda: _count(state, on_progress, total),
            )  # fmt: skip
        elif spec.arrivals is None:
            await phase(range(spec.warmup, total), warmup=False)
        else:
            result.arrival = await _open_phase(
                client, spec, payloads, lengths, results, range(spec.warmup, total), time_scale,
                stop_now, lambda: _count(state, on_progress, total),
            )  # fmt: skip
            state["stopped"] = result.arrival.pop("stopped")
            result.saturated = result.arrival["saturated"]
    finally:
        gc.unfreeze()
        for task in (ticker, sampling):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    result.stopped = state["stopped"]
    _conclude(result, results, lags, (before, before_error), await _try_scrape(client), sampler)
    result.diagnostics["receive_stamps"] = client.receive_stamps
    return result


def _conclude(result: LevelResult, results: list, lags: list[float], before: tuple,
              after: tuple, sampler: ServerSampler) -> None:  # fmt: skip
    """The level's figures from its measured requests, and what the server did meanwhile
    (/metrics before and after, `(metrics, error)` each, and the sampler's summary)."""
    spec = result.spec
    measured = [r for r in results[spec.warmup :] if r is not None]
    _aggregate(result, measured, result.slo, result.time_scale)
    result.diagnostics = _diagnostics(lags, measured, spec.concurrency)
    if before[0] is None or after[0] is None:
        result.server = {"ok": False, "error": before[1] or after[1]}
    else:
        result.server = _server_delta(before[0], after[0], result.ttft.get("mean"),
                                      result.time_scale)  # fmt: skip
    result.server.update(sampler.summary())


def _check_caller(client: Client, spec: LevelSpec, time_scale: float) -> None:
    """What the caller must get right (a ValueError: a bug, not a level's failure)."""
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    cap = spec.arrivals.max_concurrency if spec.arrivals else None
    if max(spec.concurrency, cap or 0) > client.max_connections:
        raise ValueError(
            f"concurrency {max(spec.concurrency, cap or 0)} exceeds the client's "
            f"{client.max_connections} connections"
        )


async def _prepare(
    client: Client, spec: LevelSpec, total: int, result: LevelResult
) -> tuple[list[tuple[int, int]], list[bytes], Openings | None] | None:
    """Each request's lengths and serialised body, built before anything is sent (for
    sessions: the warm-up's, and every session's opening); None (with `result.error`
    saying why) when the level cannot run."""
    refusal = level_refusal(spec)
    if refusal is not None:  # before a single prompt is built
        result.error = f"could not prepare the prompts: {refusal}"
        return None
    try:
        if spec.dataset is not None:
            lengths, payloads, result.dataset = await dataset_payloads(client, spec, total)
            return lengths, payloads, None
        lengths = request_lengths(spec, total)
        if spec.sessions is not None:
            scenario, count = spec.scenario, spec.warmup + spec.requests // spec.sessions.turns
            openings = await build_openings(client, scenario.prompt_tokens, count, spec.sessions)
            payloads = [
                request_body(client.model, True, openings.messages[i], scenario.output_tokens,
                             openings.salts[i])
                for i in range(spec.warmup)
            ]  # fmt: skip
            return lengths, payloads, openings
        return lengths, await build_payloads(client, spec, total, lengths), None
    except (PromptLengthError, RuntimeError, httpx.HTTPError, KeyError, ValueError, OSError) as exc:
        result.error = f"could not prepare the prompts: {type(exc).__name__}: {exc}"
        return None


def _count(state: dict, on_progress, total: int) -> None:
    state["done"] += 1
    if on_progress is not None:
        _call(on_progress, state["done"], total)


async def _open_phase(
    client: Client,
    spec: LevelSpec,
    payloads: list[bytes],
    lengths: list[tuple[int, int]],
    results: list,
    indices: range,
    scale: float,
    should_stop: Callable[[], bool],
    finished: Callable[[], None],
) -> dict:
    """Send each request at its due time (absolute, from the phase's start: no drift),
    whatever the earlier answers do; at most the cap in flight (a due request waits for
    a slot: the wait shows as its arrival lag). Stops sending when asked to or when the
    backlog grows without bound; the requests in flight finish."""
    arrivals = spec.arrivals
    due = [t / scale for t in arrival_offsets(arrivals, len(indices))]  # wall seconds
    slots = asyncio.Semaphore(arrivals.max_concurrency or client.max_connections)
    watch = Saturation()
    counts = {"arrived": 0, "finished": 0}
    monotonic = time.monotonic

    async def send(index: int, at: float) -> None:
        try:
            async with slots:
                r = await _one_request(client, payloads[index], index, False, lengths[index],
                                       scale, spec.endpoint == COMPLETIONS)  # fmt: skip
            r.scheduled_at = at
            results[index] = r
        finally:
            counts["finished"] += 1
            finished()

    tasks: list[asyncio.Task] = []
    stopped = False
    start = monotonic()
    for offset, index in zip(due, indices, strict=True):
        delay = start + offset - monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if should_stop():
            stopped = True
            break
        counts["arrived"] += 1
        tasks.append(asyncio.create_task(send(index, start + offset)))
        if watch.observe(counts["arrived"] - counts["finished"]):
            break
    await asyncio.gather(*tasks)
    sent = sorted(r.sent_at for r in results[indices.start :] if r is not None and r.sent_at)
    achieved = (len(sent) - 1) / ((sent[-1] - sent[0]) * scale) if len(sent) > 1 and (
        sent[-1] > sent[0]
    ) else None  # fmt: skip
    late = [
        (r.ready_at - r.scheduled_at) * 1000
        for r in results[indices.start :]
        if r is not None and r.ready_at is not None and r.scheduled_at is not None
    ]
    lag = percentiles(late, (50, 99))
    return {
        "describe": arrivals.describe(),
        "kind": arrivals.kind,
        "burstiness": arrivals.burstiness,
        "seed": arrivals.seed,
        "ramp_up_s": arrivals.ramp_up_s,
        "max_concurrency": arrivals.max_concurrency,
        "requested_rate": arrivals.rate,
        "achieved_rate": achieved,
        "arrived": counts["arrived"],
        "planned": len(indices),
        "lag_p50_ms": lag["p50"],
        "lag_p99_ms": lag["p99"],
        "lag_max_ms": max(late, default=None),
        "saturated": watch.tripped,
        "saturation": watch.reason,
        "peak_backlog": max(watch.backlog, default=0),
        "stopped": stopped,
    }


async def _one_request(
    client: Client,
    payload: bytes,
    index: int,
    warmup: bool,
    intended: tuple[int, int],
    scale: float,
    completions: bool = False,
    keep_text: bool = False,
) -> RequestResult:
    r = RequestResult(index=index, warmup=warmup, intended_prompt_tokens=intended[0],
                      intended_output_tokens=intended[1])  # fmt: skip
    parser = StreamParser(keep_text)
    monotonic = time.monotonic
    sent: list[float] = []

    async def trace(name: str, info: dict) -> None:
        if name == "http11.send_request_body.complete":
            sent.append(monotonic())

    r.ready_at = monotonic()
    try:
        async with asyncio.timeout(client.request_timeout):
            response = await client.open_stream(
                payload, None if client.stamped else trace, completions=completions
            )
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
    if parser.text is not None:
        r.answer = "".join(parser.text)
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


async def _tick(lags: list[float]) -> None:
    """Wake every TICK_S and record how late each wake-up is (event-loop lag)."""
    monotonic = time.monotonic
    target = monotonic() + TICK_S
    while True:
        await asyncio.sleep(max(target - monotonic(), 0))
        now = monotonic()
        lags.append(max(now - target, 0.0))
        target = now + TICK_S


def _call(fn: Callable, *args):
    try:
        return fn(*args)
    except Exception:  # a callback's bug must not abort the level
        log.exception("benchmark callback %r failed", fn)
        return None
