"""GuideLLM's statistics, ported to plain Python for the panel's GuideLLM export
(apps/benchmarks/guidellm_format.py): a benchmark's `metrics` computed from its requests'
stats as GuideLLM 0.8.1 computes them (`GenerativeMetrics.compile` in
guidellm/benchmark/schemas/metrics.py over the summaries of
guidellm/schemas/base/statistics.py), so that the report says what GuideLLM would say of
the same requests. tests/benchmarks/test_guidellm_export.py recompiles an exported
report's metrics with GuideLLM's own code and compares.

The requests here are the dicts the export writes (GuideLLM's `GenerativeRequestStats`
as JSON: `info.timings` and the computed fields). Pure: no Django, no numpy. Left out,
as GuideLLM leaves them out under the export's settings: confidence intervals (the report
sets `confidence: null`, GuideLLM's "no intervals"), PDFs (none unless asked for) and the
per-turn breakdown (`turns` is None: every request of the panel's is a single turn).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise

PERCENTILES = {"p001": 0.001, "p01": 0.01, "p05": 0.05, "p10": 0.1, "p25": 0.25, "p50": 0.5,
               "p75": 0.75, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}  # fmt: skip
STATUSES = ("successful", "errored", "incomplete")  # StatusBreakdown's order (then total)
THRESHOLD = 1e-4  # GuideLLM merges events closer than a tenth of a millisecond
EPSILON = 1e-6
Pair = tuple[float, float]


# --- DistributionSummary -------------------------------------------------------------------


def _empty(count: int = 0) -> dict:
    return {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0,
            "min": 0.0, "max": 0.0, "count": count, "total_sum": 0.0,
            "percentiles": dict.fromkeys(PERCENTILES, 0.0), "pdf": None, "mean_ci": None,
            "percentile_cis": None}  # fmt: skip


def _pairs(values: Iterable) -> list[Pair]:
    return [(float(v[0]), float(v[1])) if isinstance(v, tuple) else (float(v), 1.0)
            for v in values]  # fmt: skip


def summary(values: Iterable, count: int | None = None) -> dict:
    """`DistributionSummary.from_values`: numbers, or (value, weight) pairs."""
    pairs = _pairs(values)
    if not pairs:
        return _empty()
    if count is None:
        count = round(sum(w for _, w in pairs))
    weights: dict[float, float] = {}
    for value, weight in sorted(pairs):
        weights[value] = weights.get(value, 0.0) + weight
    kept = [(v, w) for v, w in weights.items() if w > 0]
    total = sum(w for _, w in kept)
    if total <= EPSILON:
        kept = [(v, 1.0) for v, _ in kept]
        total = float(len(kept))
    if not kept:
        return _empty(count)
    values_ = [v for v, _ in kept]
    probs = [w / total for _, w in kept]
    cdf, running = [], 0.0
    for p in probs:
        running += p
        cdf.append(running)
    last = len(values_) - 1
    cuts = {k: values_[min(bisect_left(cdf, q), last)] for k, q in PERCENTILES.items()}
    mean = sum(v * p for v, p in zip(values_, probs, strict=True))
    variance = sum((v - mean) ** 2 * p for v, p in zip(values_, probs, strict=True))
    return {"mean": mean, "median": cuts["p50"], "mode": values_[probs.index(max(probs))],
            "variance": variance, "std_dev": math.sqrt(variance), "min": values_[0],
            "max": values_[-1], "count": count, "total_sum": mean * count,
            "percentiles": cuts, "pdf": None, "mean_ci": None, "percentile_cis": None}  # fmt: skip


def _merge(pairs: list[Pair], threshold: float | None = THRESHOLD) -> list[list[float]]:
    """Sorted (time, weight) with equal times summed, then each run of times within
    `threshold` of its first kept as that first time with the run's weight (GuideLLM's
    `_merge_sorted_times_with_weights`, in one pass: a time within the threshold of its
    group's first joins the group, the next one after starts a new group)."""
    limit = threshold if threshold is not None and threshold > 0 else 0.0
    merged: list[list[float]] = []
    bound = -math.inf
    for time, weight in pairs:
        if time <= bound:
            merged[-1][1] += weight
        else:
            merged.append([time, weight])
            bound = time + limit
    return merged


def rate_summary(events: Iterable, start: float | None = None, end: float | None = None) -> dict:
    """`DistributionSummary.rate_distribution_from_timings`: events at times (or
    (time, count) pairs), as a rate weighted by each event's share of the time."""
    pairs = _pairs(events)
    if start is not None:
        pairs = [(start, 0.0)] + [p for p in pairs if p[0] >= start]
    if end is not None:
        pairs = [p for p in pairs if p[0] <= end] + [(end, 0.0)]
    merged = _merge(sorted(pairs, key=lambda p: p[0]))
    if len(merged) <= 1:
        return _empty()
    times = [t for t, _ in merged]
    middles = [(b + a) / 2 for a, b in pairwise(times)]
    durations = [middles[0] - times[0]]
    durations += [b - a for a, b in pairwise(middles)]
    durations.append(max(times[-1] - middles[-1], EPSILON))
    rates = [(w / d, d) for (_, w), d in zip(merged, durations, strict=True)]
    return summary(rates, count=round(sum(w for _, w in merged)))


def concurrency_summary(intervals: Iterable[tuple], start: float | None = None,
                        end: float | None = None) -> dict:  # fmt: skip
    """`DistributionSummary.concurrency_distribution_from_timings`: (start, end[, weight])
    intervals, as the level in flight weighted by how long it held."""
    spans = [(float(i[0]), float(i[1]), float(i[2]) if len(i) > 2 else 1.0) for i in intervals]
    spans = [s for s in spans if (start is None or s[1] >= start) and (end is None or s[0] <= end)]
    count = len(spans)
    changes = _merge(sorted([(s, w) for s, _, w in spans] + [(e, -w) for _, e, w in spans],
                            key=lambda p: p[0]))  # fmt: skip
    if start is not None and changes:
        at = bisect_left([t for t, _ in changes], start)
        prior = sum(w for _, w in changes[:at]) if at > 0 else 0.0
        changes = [(start, prior), *changes[at:]]
    if end is not None and changes:
        changes = [*changes[: bisect_right([t for t, _ in changes], end)], (end, 0.0)]
    levels, running = [], 0.0
    for _, weight in changes:
        running += weight
        levels.append(max(running, 0.0))
    if len(levels) <= 1:
        return summary([] if count == 0 else [levels[0]])
    durations = [max(b - a, 0.0) for (a, _), (b, _) in pairwise(changes)]
    if not any(d > 0 for d in durations):
        return _empty()
    return summary(list(zip(levels[:-1], durations, strict=True)), count=count)


# --- StatusDistributionSummary ----------------------------------------------------------------


def _extract(function: Callable, requests: Sequence[dict]) -> list:
    out: list = []
    for request in requests:
        value = function(request)
        if value is None:
            continue
        out.extend(value) if isinstance(value, list) else out.append(value)
    return out


def _by_status(lists: dict[str, list], compute: Callable[[list], dict]) -> dict:
    every = [v for status in ("successful", "incomplete", "errored") for v in lists[status]]
    same = len(every) == len(lists["successful"])  # nothing failed: total is successful's
    result = {status: compute(lists[status]) for status in STATUSES}
    result["total"] = result["successful"] if same else compute(every)
    return result


def by_status(function: Callable, groups: dict[str, list[dict]]) -> dict:
    """`StatusDistributionSummary.from_values_function`."""
    return _by_status({s: _extract(function, groups[s]) for s in STATUSES}, summary)


def rates_by_status(function: Callable, groups: dict, start=None, end=None) -> dict:
    """`StatusDistributionSummary.rate_distribution_from_timings_function`."""
    lists = {s: _extract(function, groups[s]) for s in STATUSES}
    return _by_status(lists, lambda events: rate_summary(events, start, end))


def concurrency_by_status(function: Callable, groups: dict, start=None, end=None) -> dict:
    """`StatusDistributionSummary.concurrency_distribution_from_timings_function`."""
    lists = {s: _extract(function, groups[s]) for s in STATUSES}
    return _by_status(lists, lambda spans: concurrency_summary(spans, start, end))


# --- a request's token timings (GenerativeRequestStats' properties) -----------------------


def _timing(request: dict, key: str):
    return request["info"]["timings"][key]


def _first_token(request: dict) -> float | None:
    return request["info"]["timings"]["first_token_iteration"]


def _first_output_token(request: dict) -> float | None:
    return request["info"]["timings"]["first_output_token_iteration"]


def _linspace(first: float, last: float, num: int) -> list[float]:
    """numpy.linspace(first, last, num): evenly spaced, the last exactly `last`."""
    step = (last - first) / (num - 1)
    return [i * step + first for i in range(num - 1)] + [last]


def iter_tokens_timings(request: dict) -> list[Pair]:
    first, last = _first_token(request), _timing(request, "last_token_iteration")
    iterations, per = _timing(request, "token_iterations"), request["iter_tokens_per_iteration"]
    if first is None or last is None or per is None or iterations <= 1:
        return []
    return [(t, per) for t in _linspace(first, last, iterations)[1:]]


def output_tokens_timings(request: dict) -> list[Pair]:
    first, last = _first_token(request), _timing(request, "last_token_iteration")
    out = request["output_tokens"]
    if first is None or last is None or _timing(request, "token_iterations") <= 1:
        return [(last if last is not None else request["request_end_time"], out or 0.0)]
    return [(first, 1.0 * bool(out)), *iter_tokens_timings(request)]


def prompt_tokens_timing(request: dict) -> Pair:
    first = _timing(request, "first_token_iteration")
    return (first if first is not None else request["request_end_time"],
            request["prompt_tokens"] or 0.0)  # fmt: skip


def total_tokens_timings(request: dict) -> list[Pair]:
    return [prompt_tokens_timing(request), *output_tokens_timings(request)]


def within(requests: list[dict], start: float, end: float, start_of=None, end_of=None) -> list:
    """`GenerativeRequestsAccumulator.get_within_range` (partial overlap): a request without
    a start counts as instantaneous at its end; one without an end is left out."""
    start_of = start_of or (lambda r: r["request_start_time"])
    end_of = end_of or (lambda r: r["request_end_time"])
    kept = []
    for request in requests:
        finish = end_of(request)
        if finish is None:
            continue
        begin = start_of(request)
        if finish >= start and (finish if begin is None else begin) <= end:
            kept.append(request)
    return kept


# --- GenerativeMetrics.compile ------------------------------------------------------------------


def _usage_summary(groups: dict, name: str) -> dict:
    """`GenerativeMetricsSummary.compile` for one usage field (text_tokens, image_count, …):
    input, output and their total as values, rates and concurrency; None where no request
    has the field."""
    timed = {s: [(r["request_start_time"], r["request_end_time"], r["input_metrics"].get(name),
                  r["output_metrics"].get(name)) for r in groups[s]
                 if r["request_start_time"] and r["request_end_time"]
                 and (r["input_metrics"].get(name) is not None
                      or r["output_metrics"].get(name) is not None)]
             for s in STATUSES}  # fmt: skip
    out: dict = {}
    parts = {}
    for side, at in (("input", 2), ("output", 3)):
        values = {s: [float(m[at]) for m in timed[s] if m[at] is not None] for s in STATUSES}
        if not any(values.values()):
            out |= {side: None, f"{side}_per_second": None, f"{side}_concurrency": None}
            continue
        rates = {s: [(m[1], float(m[at] or 0.0)) for m in timed[s]] for s in STATUSES}
        spans = {s: [(m[0], m[1], float(m[at] or 0.0)) for m in timed[s]] for s in STATUSES}
        parts[side] = (values, rates, spans)
        out |= {side: _by_status(values, summary),
                f"{side}_per_second": _by_status(rates, rate_summary),
                f"{side}_concurrency": _by_status(spans, concurrency_summary)}  # fmt: skip
    if len(parts) < 2:
        return out | {"total": None, "total_per_second": None, "total_concurrency": None}
    both = [{s: parts["input"][k][s] + parts["output"][k][s] for s in STATUSES} for k in range(3)]
    return out | {"total": _by_status(both[0], summary),
                  "total_per_second": _by_status(both[1], rate_summary),
                  "total_concurrency": _by_status(both[2], concurrency_summary)}  # fmt: skip


USAGE = {
    "text": {"tokens": "text_tokens", "words": "text_words", "characters": "text_characters"},
    "image": {"tokens": "image_tokens", "images": "image_count", "pixels": "image_pixels",
              "bytes": "image_bytes"},
    "video": {"tokens": "video_tokens", "frames": "video_frames", "seconds": "video_seconds",
              "bytes": "video_bytes"},
    "audio": {"tokens": "audio_tokens", "samples": "audio_samples", "seconds": "audio_seconds",
              "bytes": "audio_bytes"},
    "tool_call": {"tokens": "tool_call_tokens", "mixed_tokens": "mixed_content_tool_tokens",
                  "count": "tool_call_count"},
}  # fmt: skip


def _goodput(slo: dict | None, groups: dict, start: float, end: float) -> dict:
    """`GenerativeMetrics._compile_goodput`: attainment over the successful requests whose
    objectives could be judged plus the errored ones, and the conforming requests' rate."""
    none = {"slo_attainment": None, "slo_determined_requests": 0, "request_goodput": None}
    if not slo:
        return none
    conforming, determined = [], 0
    for request in groups["successful"]:
        latency = request["request_latency"]
        measured = (request["time_to_first_token_ms"], request["inter_token_latency_ms"],
                    None if latency is None else latency * 1000.0)  # fmt: skip
        limits = (slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("e2el_ms"))
        judged = [(v, lim) for v, lim in zip(measured, limits, strict=True) if lim is not None]
        if any(v is None for v, _ in judged):
            continue
        determined += 1
        if all(v <= lim for v, lim in judged):
            conforming.append(request)
    determined += len(groups["errored"])
    if determined == 0:
        return none
    rates = rates_by_status(lambda r: r["request_end_time"],
                            {"successful": conforming, "errored": [], "incomplete": []},
                            start, end)  # fmt: skip
    return {"slo_attainment": len(conforming) / determined,
            "slo_determined_requests": determined, "request_goodput": rates}  # fmt: skip


def _value(key: str) -> Callable[[dict], float]:
    return lambda r: r[key] or 0.0


def _span(request: dict) -> tuple[float, float] | None:
    start, end = request["request_start_time"], request["request_end_time"]
    return None if start is None or end is None else (start, end)


def _streaming_iterations(request: dict) -> float:
    return request["info"]["timings"]["request_iterations"] or 0.0


def _tpot(request: dict) -> Pair:  # weighted by the tokens it spans
    return (request["time_per_output_token_ms"] or 0.0, request["output_tokens"] or 0.0)


def _itl(request: dict) -> Pair:  # weighted by the tokens after the first
    return (request["inter_token_latency_ms"] or 0.0, (request["output_tokens"] or 1.0) - 1.0)


def _schedule_metrics(groups: dict, schedule: bool) -> dict:
    """The arrival-schedule metrics: None unless the strategy sets an arrival schedule
    (constant, poisson), as GuideLLM leaves them for closed loops."""
    keys = ("request_dispatch_delay", "request_scheduled_latency", "turn_predecessor_delay",
            "turn_scheduling_delay")  # fmt: skip
    out = {k: by_status(_value_or_none(k), groups) if schedule else None for k in keys}
    every = [r for s in ("successful", "incomplete", "errored") for r in groups[s]]
    delays = [r["request_dispatch_delay"] for r in every if r["info"]["preceding_nodes"] == 0]
    delays = [d for d in delays if d is not None]
    return out | {"root_dispatch_delay": summary(delays) if delays else None}


def _value_or_none(key: str) -> Callable[[dict], float | None]:
    return lambda r: r[key]


def metrics(requests: dict[str, list[dict]], start: float, end: float, *, slo: dict | None,
            schedule: bool) -> dict:  # fmt: skip
    """A benchmark's `metrics` from its requests by status (successful, errored,
    incomplete) over the measured window [start, end]."""
    groups = {s: within(requests[s], start, end) for s in STATUSES}
    first = {s: within(requests[s], start, end, end_of=_first_token) for s in STATUSES}
    after = {s: within(requests[s], start, end, start_of=_first_token) for s in STATUSES}
    output = {s: within(requests[s], start, end, end_of=_first_output_token) for s in STATUSES}
    totals = {s: len(groups[s]) for s in STATUSES}
    return {
        "request_totals": totals | {"total": sum(totals.values())},
        "requests_per_second": rates_by_status(
            _value_or_none("request_end_time"), groups, start, end
        ),
        "request_concurrency": concurrency_by_status(_span, groups, start, end),
        "request_latency": by_status(_value("request_latency"), groups),
        **_schedule_metrics(groups, schedule),
        "request_streaming_iterations_count": by_status(_streaming_iterations, groups),
        "prompt_token_count": by_status(_value("prompt_tokens"), groups),
        "output_token_count": by_status(_value("output_tokens"), groups),
        "total_token_count": by_status(_value("total_tokens"), groups),
        "time_to_first_token_ms": by_status(_value("time_to_first_token_ms"), first),
        "time_to_last_round_trip_ms": by_status(_value("time_to_last_round_trip_ms"), groups),
        "avg_round_trip_time_ms": by_status(_value("avg_round_trip_time_ms"), groups),
        "time_to_first_output_token_ms": by_status(_value("time_to_first_output_token_ms"), output),
        "time_per_output_token_ms": by_status(_tpot, groups),
        "inter_token_latency_ms": by_status(_itl, after),
        "prompt_tokens_per_second": rates_by_status(prompt_tokens_timing, groups, start, end),
        "output_tokens_per_second": rates_by_status(output_tokens_timings, groups, start, end),
        "tokens_per_second": rates_by_status(total_tokens_timings, groups, start, end),
        "output_tokens_per_iteration": by_status(
            lambda r: [tokens for _, tokens in output_tokens_timings(r)], groups
        ),
        "iter_tokens_per_iteration": by_status(
            lambda r: [tokens for _, tokens in iter_tokens_timings(r)], groups
        ),
        **{
            domain: {key: _usage_summary(groups, name) for key, name in fields.items()}
            for domain, fields in USAGE.items()
        },
        "turns": None,  # a single turn: GuideLLM gives per-turn figures from two turns on
        **_goodput(slo, groups, start, end),
    }
