"""Read-only: a request-rate sweep's results and the answers drawn from them (goodput,
the saturation point, the knee), for the job page and the API (docs/benchmarks.md)."""

from __future__ import annotations

from apps.benchmarks.models import Job, Result
from apps.benchmarks.plans import sweep_shape
from apps.benchmarks.selectors import client_flag, decode_timed, itl_from_bursts


def rate_results(job: Job) -> list[Result]:
    """A rate sweep's levels, lowest rate first, each with its arrivals' record, whether
    its backlog grew without bound (`saturated`) and the client's own flags."""
    levels = list(job.results.filter(kind=Result.Kind.RATE).order_by("request_rate"))
    for r in levels:
        r.arrival = (r.metrics or {}).get("arrival") or {}
        r.saturated = bool((r.metrics or {}).get("saturated"))
        r.client_flag, r.itl_from_bursts = client_flag(r), itl_from_bursts(r)
    return levels


def rate_answer(job: Job) -> dict | None:
    """Goodput in the team's terms: the highest request rate whose level kept up (no
    saturation) and met the SLO at p95 TTFT and per-user decode rate."""
    sweep, slo = job.plan.get("sweep") or {}, job.plan.get("slo") or {}
    levels = rate_results(job)
    if sweep.get("mode") != "rate" or not slo or not levels:
        return None
    min_tps = 1 / slo["tpot_s"]
    meeting = [
        r for r in levels
        if not r.saturated and r.ttft_p95_s is not None and r.ttft_p95_s <= slo["ttft_s"]
        and decode_timed(r) and (r.decode_tps_p50 or 0) >= min_tps
    ]  # fmt: skip
    best = max(meeting, key=lambda r: r.request_rate) if meeting else None
    saturated = next((r for r in levels if r.saturated), None)
    not_run = [x for x in sweep.get("rates", []) if x not in {r.request_rate for r in levels}]
    shape = sweep_shape(job.plan)
    if best:
        text = (
            f"Holds {best.request_rate:g} requests/s of {shape} with TTFT p95 ≤ "
            f"{slo['ttft_s']:g} s and ≥ {min_tps:.0f} tok/s each (measured "
            f"{best.ttft_p95_s:.2f} s and {best.decode_tps_p50:.1f} tok/s; goodput "
            f"{best.goodput_rps or 0:.2f} req/s)."
        )
    else:
        text = f"No measured rate meets TTFT p95 ≤ {slo['ttft_s']:g} s with ≥ {min_tps:.0f} tok/s."
    if saturated:
        text += f" At {saturated.request_rate:g} req/s the server fell behind (saturated)."
    knee = knee_rate(levels)
    if knee is not None:
        text += f" The knee: past {knee:g} req/s, TTFT grows faster than throughput."
    return {
        "text": text,
        "knee": knee,
        "rate": best.request_rate if best else None,
        "saturated_at": saturated.request_rate if saturated else None,
        "not_run": not_run,
        "shape": shape,
        "arrivals": (levels[0].arrival or {}).get("describe", "").partition(", ")[2],
    }


def knee_rate(levels: list[Result]) -> float | None:
    """The knee of the rate–latency curve (Kneedle's idea): with each level's achieved
    rate and TTFT p95 both scaled to 0–1 over the sweep, the level where throughput most
    exceeds latency — the last rate before more traffic mostly buys queueing. None with
    fewer than three levels, or a flat curve."""
    points = [
        (r.request_rate, (r.arrival or {}).get("achieved_rate") or r.request_rate, r.ttft_p95_s)
        for r in levels
        if r.ttft_p95_s is not None
    ]
    if len(points) < 3:
        return None
    xs, ys = [p[1] for p in points], [p[2] for p in points]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    if span_x <= 0 or span_y <= 0:
        return None
    gaps = [
        ((x - min(xs)) / span_x) - ((y - min(ys)) / span_y) for x, y in zip(xs, ys, strict=True)
    ]
    best = max(range(len(points)), key=gaps.__getitem__)
    return points[best][0] if 0 < best < len(points) - 1 or gaps[best] > 0 else None


def rate_chart(jobs: list[Job]) -> dict | None:
    """TTFT p95 and E2E p50 against the requested rate, one pair of lines per job (the
    "lines" chart); None when no job has rate levels."""
    per_job = [(job, {r.request_rate: r for r in rate_results(job)}) for job in jobs]
    rates = sorted({rate for _job, levels in per_job for rate in levels})
    if not rates:
        return None
    series = []
    for job, levels in per_job:
        if not levels:
            continue
        prefix = f"job {job.pk} " if len(jobs) > 1 else ""
        for label, attr in (("TTFT p95", "ttft_p95_s"), ("E2E p50", "e2e_p50_s")):
            values = [getattr(levels[x], attr) if x in levels else None for x in rates]
            series.append({"label": prefix + label, "values": values})
    return {"x": rates, "x_label": "requested rate (req/s)", "series": series, "unit": "s"}
