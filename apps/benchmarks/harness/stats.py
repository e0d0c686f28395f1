"""The numbers a benchmark reports, computed from the receive times the transport took:
per request (`stream_metrics`: TTFT, E2E, TPOT, ITL, decode and prefill rates), per
level (`_aggregate`: summaries over the measured requests, throughputs over the
steady-state window, goodput), the client's self-diagnostics (`_diagnostics`,
`client_flag`, `itl_from_bursts`), and what a measurement can say (`decode_too_short`).
Pure functions, no I/O: the package docstring says how each number is defined."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from apps.benchmarks.harness.types import MAX_STORED_GAPS, SLO, LevelResult, RequestResult

DEFAULT_PERCENTILES = (50, 90, 99)
SATURATION_LAG_MS = 5.0  # loop lag p99 above this: the client, not the server, is the limit
# A decode rate needs enough tokens and enough time to be a rate: below either bound the
# gap between the first and the last token is scheduling and transport noise.
DECODE_MIN_TOKENS = 16  # generated tokens per request
DECODE_MIN_WALL_S = 0.020  # wall-clock seconds from the first to the last token


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


# The words a level's client readout uses, the same on the results pages and in the
# exports (`client_flag`). Not "saturated": that word is a rate level's growing backlog
# (the server fell behind, arrivals.Saturation), a different thing with a different cause.
CLIENT_OK, CLIENT_LAG, CLIENT_BUSY = "ok", "client lag", "busy machine"
# A level's median inter-token latency under this share of its median TPOT, from a client
# that lagged: its chunks were read in bursts (see itl_from_bursts).
ITL_BURST_RATIO = 0.1


def client_lagged(diagnostics: dict | None) -> bool:
    """Whether the load generator's event loop lagged during the level (loop lag p99 over
    SATURATION_LAG_MS), whatever the number of streams."""
    diagnostics = diagnostics or {}
    lagged = diagnostics.get("client_lagged")
    if lagged is None:  # results stored before the flag was split
        lagged = diagnostics.get("client_saturated") or diagnostics.get("busy_machine")
    return bool(lagged)


def client_flag(diagnostics: dict | None, concurrency: float) -> str:
    """What the load generator's event-loop lag says about a level. More than one stream
    with lag p99 over the threshold: "client lag" (the client's own load may have inflated
    the latencies). At one stream the client has next to nothing to do, so the same lag
    means the machine it ran on was busy with something else: "busy machine"."""
    if not client_lagged(diagnostics):
        return CLIENT_OK
    return CLIENT_BUSY if concurrency <= 1 else CLIENT_LAG


def itl_from_bursts(metrics: dict | None) -> bool:
    """True when a stored level's inter-token latencies are the client's bursts, not the
    server's pace. A client that falls behind finds several chunks waiting and reads them
    at once; one read is dated once (the kernel's stamp of its last bytes), so the gaps
    between those chunks come out as ~0 ms. The harness keeps, for every level, the
    summaries of ITL and TPOT and its loop-lag diagnostics (the chunk gaps only up to
    MAX_STORED_GAPS), so the rule reads those: the client lagged, and the median ITL is
    under ITL_BURST_RATIO of the median TPOT — more than half of the per-token gaps are
    ten times shorter than the requests' own mean time per token, which decoding does
    not do (a chunk of several tokens is divided by its tokens). TPOT, from each request's
    first and last token, is not affected."""
    metrics = metrics or {}
    if not client_lagged(metrics.get("diagnostics")):
        return False
    itl = (metrics.get("itl") or {}).get("p50")
    tpot = (metrics.get("tpot") or {}).get("p50")
    return itl is not None and bool(tpot) and itl < ITL_BURST_RATIO * tpot


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


def _aggregate(res: LevelResult, measured: list[RequestResult], slo: SLO | None, scale: float):
    ok = [r for r in measured if r.ok]
    res.sent, res.ok, res.failed = len(measured), len(ok), len(measured) - len(ok)
    for r in measured:
        if not r.ok:
            res.errors[r.error_kind] = res.errors.get(r.error_kind, 0) + 1
    res.prompt_mismatches = sum(r.prompt_mismatch for r in measured)
    res.output_mismatches = sum(r.output_mismatch for r in measured)
    origin = min((r.sent_at for r in measured if r.sent_at is not None), default=None)
    keep_gaps = sum(max(len(r.chunk_times) - 1, 0) for r in measured) <= MAX_STORED_GAPS
    res.requests = [r.compact(origin, scale, gaps=keep_gaps) for r in measured]
    res.gaps_kept = keep_gaps
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
        # The same lag reads two ways, by the streams: see client_flag.
        "client_lagged": lagged,
        "client_flag": client_flag({"client_lagged": lagged}, concurrency),
        "saturation_threshold_ms": SATURATION_LAG_MS,
    }
