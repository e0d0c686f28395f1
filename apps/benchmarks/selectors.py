"""What the job and comparison pages show, computed from stored results."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from apps.benchmarks.models import Job, Result
from apps.benchmarks.reference import SEED_SOURCE, seed_for
from apps.recipes.planner import roofline_check


def decode_ceiling(job: Job) -> float | None:
    """The planner's single-stream decode ceiling for this recipe on this host."""
    try:
        return job.recipe.plan(job.host.spec()).decode_ceiling_tps
    except Exception:  # an incomplete architecture: no ceiling, say nothing
        return None


@dataclass(frozen=True)
class ScenarioRow:
    result: Result
    seed: dict | None
    roofline_percent: float | None
    roofline_message: str
    plausible: bool


def scenario_rows(job: Job) -> list[ScenarioRow]:
    ceiling = decode_ceiling(job)
    rows = []
    for result in job.results.filter(kind=Result.Kind.SCENARIO):
        percent, message, plausible = None, "", True
        if ceiling and result.decode_tps_p50:
            check = roofline_check(result.decode_tps_p50, ceiling)
            percent, message, plausible = check.percent, check.message, check.plausible
        rows.append(
            ScenarioRow(
                result,
                seed_for(job.recipe.model_id, result.prompt_tokens, result.output_tokens),
                percent,
                message,
                plausible,
            )
        )
    return rows


def sweep_results(job: Job) -> list[Result]:
    return list(job.results.filter(kind=Result.Kind.SWEEP).order_by("concurrency"))


def capacity_answer(job: Job) -> dict | None:
    """The largest measured concurrency whose TTFT p95 and per-user decode rate meet the
    suite's SLO: "serves N concurrent users with TTFT p95 ≤ X s and ≥ Y tok/s each"."""
    slo = job.plan.get("slo") or {}
    levels = [r for r in sweep_results(job) if r.ok and r.ttft_p95_s is not None]
    if not slo or not levels:
        return None
    min_tps = 1 / slo["tpot_s"]
    meeting = [
        r for r in levels if r.ttft_p95_s <= slo["ttft_s"] and (r.decode_tps_p50 or 0) >= min_tps
    ]
    best = max(meeting, key=lambda r: r.concurrency) if meeting else None
    answer = {
        "slo_ttft_s": slo["ttft_s"],
        "slo_tps": round(min_tps, 1),
        "users": best.concurrency if best else 0,
        "ttft_p95_s": best.ttft_p95_s if best else None,
        "decode_tps_p50": best.decode_tps_p50 if best else None,
        "tested_up_to": max(r.concurrency for r in levels),
        "shape": f"{job.plan['sweep']['prompt_tokens']}/{job.plan['sweep']['output_tokens']}",
    }
    if best:
        answer["text"] = (
            f"This recipe serves {best.concurrency} concurrent user"
            f"{'s' if best.concurrency != 1 else ''} with TTFT p95 ≤ {slo['ttft_s']:g} s and "
            f"≥ {min_tps:.0f} tok/s each (measured {best.ttft_p95_s:.2f} s and "
            f"{best.decode_tps_p50:.1f} tok/s at {best.concurrency})."
        )
    else:
        answer["text"] = (
            f"No measured level meets TTFT p95 ≤ {slo['ttft_s']:g} s with ≥ {min_tps:.0f} tok/s "
            "per user."
        )
    return answer


def summary_of(answer: dict | None) -> dict:
    """A job's stored summary (and the webhook's): the capacity answer in two fields."""
    return {
        "capacity_users": answer["users"] if answer else None,
        "capacity_text": answer["text"] if answer else "",
    }


def scenario_chart(job: Job) -> dict:
    rows = scenario_rows(job)
    labels = [f"{r.result.prompt_tokens}/{r.result.output_tokens}" for r in rows]

    def series(metric: str, attr: str) -> list[dict]:
        out = [{"label": "measured", "values": [getattr(r.result, attr) for r in rows]}]
        if any(r.seed for r in rows):
            out.append(
                {
                    "label": f"seed ({SEED_SOURCE})",
                    "values": [r.seed.get(metric) if r.seed else None for r in rows],
                }
            )
        return out

    return {
        "scenarios": labels,
        "metrics": {
            "ttft_s": {"unit": "s", "series": series("ttft_s", "ttft_p50_s")},
            "decode_tps": {"unit": "tok/s", "series": series("decode_tps", "decode_tps_p50")},
        },
    }


def curve_series(job: Job) -> dict:
    return {
        "label": f"job {job.pk} ({job.recipe.name}, {job.host.name})",
        "points": [
            {"concurrency": r.concurrency, "x": r.decode_tps_p50, "y": r.output_tps}
            for r in sweep_results(job)
            if r.decode_tps_p50 is not None and r.output_tps is not None
        ],
    }


def curve_chart(jobs: list[Job]) -> dict:
    return {
        "series": [curve_series(job) for job in jobs],
        "x_label": "per-user decode tok/s (p50)",
        "y_label": "aggregate output tok/s",
    }


def ttft_chart(jobs: list[Job]) -> dict:
    levels = sorted({r.concurrency for job in jobs for r in sweep_results(job)})
    series = []
    for job in jobs:
        by_level = {r.concurrency: r for r in sweep_results(job)}
        prefix = f"job {job.pk} " if len(jobs) > 1 else ""
        for label, attr in (("TTFT p50", "ttft_p50_s"), ("TTFT p99", "ttft_p99_s")):
            series.append(
                {
                    "label": prefix + label,
                    "values": [
                        getattr(by_level[c], attr) if c in by_level else None for c in levels
                    ],
                }
            )
    return {"x": levels, "x_label": "concurrent requests", "series": series, "unit": "s"}


# Keys follow `vllm bench serve`'s result names where the meaning matches.
EXPORT_FIELDS = [
    ("job", lambda j, r: j.pk),
    ("kind", lambda j, r: r.kind),
    ("scenario", lambda j, r: r.scenario),
    ("input_len", lambda j, r: r.prompt_tokens),
    ("output_len", lambda j, r: r.output_tokens),
    ("max_concurrency", lambda j, r: r.concurrency),
    ("completed", lambda j, r: r.ok),
    ("failed", lambda j, r: r.failed),
    ("complete", lambda j, r: r.complete),
    ("request_throughput", lambda j, r: r.request_rps),
    ("output_throughput", lambda j, r: r.output_tps),
    ("request_goodput", lambda j, r: r.goodput_rps),
    ("median_ttft_ms", lambda j, r: _ms(r.ttft_p50_s)),
    ("p95_ttft_ms", lambda j, r: _ms(r.ttft_p95_s)),
    ("p99_ttft_ms", lambda j, r: _ms(r.ttft_p99_s)),
    ("median_e2el_ms", lambda j, r: _ms(r.e2e_p50_s)),
    ("median_decode_tok_s", lambda j, r: r.decode_tps_p50),
    ("median_prefill_tok_s", lambda j, r: r.prefill_tps_p50),
    ("median_tpot_ms", lambda j, r: _ms(r.metrics.get("tpot", {}).get("p50"))),
    ("median_itl_ms", lambda j, r: _ms(r.metrics.get("itl", {}).get("p50"))),
    ("recipe", lambda j, r: j.recipe.name),
    ("model_id", lambda j, r: j.recipe.model_id),
    ("image", lambda j, r: j.context.get("image", "")),
    ("image_digest", lambda j, r: j.image_digest),
    ("host", lambda j, r: j.host.name),
    ("simulated", lambda j, r: j.context.get("simulated", False)),
]


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 3)


def export_rows(jobs: list[Job]) -> list[dict]:
    return [
        {key: get(job, result) for key, get in EXPORT_FIELDS}
        for job in jobs
        for result in job.results.all()
    ]


def export_csv(jobs: list[Job]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[key for key, _ in EXPORT_FIELDS])
    writer.writeheader()
    for row in export_rows(jobs):
        writer.writerow(row)
    return out.getvalue()


def export_json(job: Job) -> dict:
    return {
        "job": job.pk,
        "state": job.state,
        "suite": job.plan,
        "recipe": {"name": job.recipe.name, "model_id": job.recipe.model_id},
        "host": job.host.name,
        "context": job.context,
        "queued_at": job.queued_at.isoformat(),
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "error": job.error,
        "capacity": capacity_answer(job),
        "decode_ceiling_tps": decode_ceiling(job),
        "results": [
            {key: get(job, result) for key, get in EXPORT_FIELDS} | {"metrics": result.metrics}
            for result in job.results.all()
        ],
    }
