"""What the job and comparison pages show, computed from stored results."""

from __future__ import annotations

from dataclasses import dataclass

from apps.benchmarks import harness
from apps.benchmarks.models import Job, Result
from apps.benchmarks.reference import (
    SEED_SOURCE,
    has_reference_shape,
    reference_missing_detail,
    seed_for,
    seed_notes,
)
from apps.core.csvsafe import csv_text
from sparkdomain.planner import roofline_check


def decode_ceiling(job: Job) -> float | None:
    """The planner's single-stream decode ceiling for this recipe on this host."""
    try:
        return job.recipe.plan(job.host.spec()).decode_ceiling_tps
    except Exception:  # an incomplete architecture: no ceiling, say nothing
        return None


def decode_timed(result: Result) -> bool:
    """Whether the result's decode rate is a rate (harness.decode_too_short): stored by the
    harness since it knew; older results are judged from their stored numbers."""
    stored = (result.metrics or {}).get("decode_timed")
    if stored is not None:
        return bool(stored)
    scale = (result.metrics or {}).get("time_scale") or 1.0
    seconds = harness.decode_seconds(result.output_tokens, result.decode_tps_p50)
    return not harness.decode_too_short(result.output_tokens, seconds, scale)


def timed_decode_tps(result: Result) -> float | None:
    """The decode rate to show, chart and credit: None when too short to time."""
    return result.decode_tps_p50 if decode_timed(result) else None


@dataclass(frozen=True)
class ScenarioRow:
    result: Result
    seed: dict | None
    roofline_percent: float | None
    roofline_message: str
    plausible: bool
    decode_timed: bool = True
    seed_notes: dict | None = None  # {figure: note} on the seed's figures for this shape
    reference_missing: bool = False  # the seed has this shape, but not for this model


def scenario_rows(job: Job) -> list[ScenarioRow]:
    ceiling = decode_ceiling(job)
    rows = []
    for result in job.results.filter(kind=Result.Kind.SCENARIO):
        percent, message, plausible = None, "", True
        timed = decode_timed(result)
        if ceiling and result.decode_tps_p50 and timed:
            check = roofline_check(result.decode_tps_p50, ceiling)
            percent, message, plausible = check.percent, check.message, check.plausible
        seed = seed_for(job.recipe.model_id, result.prompt_tokens, result.output_tokens)
        rows.append(
            ScenarioRow(
                result,
                seed,
                percent,
                message,
                plausible,
                decode_timed=timed,
                seed_notes=seed_notes(result.prompt_tokens, result.output_tokens) if seed else {},
                reference_missing=seed is None
                and has_reference_shape(result.prompt_tokens, result.output_tokens),
            )
        )
    return rows


def reference_note(job: Job, rows: list[ScenarioRow]) -> str:
    """Why there is "No published reference for this model" (the page's words before it)
    where the suite's scenarios have published figures but not for this job's model; ""
    otherwise."""
    if any(r.reference_missing for r in rows):
        return reference_missing_detail(job.recipe.model_id)
    return ""


def seed_footnotes(rows: list[ScenarioRow]) -> list[dict]:
    """The notes on the seed figures shown, one per noted figure, for the table's foot."""
    labels = {"ttft_s": "TTFT", "e2e_s": "total", "prefill_tps": "prefill tok/s",
              "decode_tps": "decode tok/s"}  # fmt: skip
    out = []
    for row in rows:
        for field_name, note in (row.seed_notes or {}).items():
            shape = f"{row.result.prompt_tokens}/{row.result.output_tokens}"
            figure = f"{row.seed[field_name]:g}" if row.seed else ""
            out.append({"shape": shape, "figure": labels.get(field_name, field_name),
                        "value": figure, "note": note})  # fmt: skip
    return out


def suites_of(jobs: list[Job]) -> dict:
    """Which suite each compared job measured, and whether they differ: capacity answers
    depend on the suite's sweep and SLO. Suites differ by name or, for one name, by what
    they measure (a suite edited between the jobs: each job keeps its queued copy)."""

    def measured(plan: dict) -> dict:
        return {k: v for k, v in (plan or {}).items() if k not in ("name", "suite_id")}

    names = [(job.plan or {}).get("name") or str(job.suite) for job in jobs]
    plans = [measured(job.plan) for job in jobs]
    same_name = len(set(names)) == 1
    same_plan = all(p == plans[0] for p in plans)
    warning = ""
    if not same_name:
        warning = (
            "These jobs used different suites ("
            + ", ".join(f"job {j.pk}: {n}" for j, n in zip(jobs, names, strict=True))
            + "): their scenarios, sweeps and SLOs can differ, and capacity answers depend on "
            "them. Compare like with like."
        )
    elif not same_plan:
        warning = (
            f"These jobs used different versions of the suite “{names[0]}” (it was edited "
            "between them): their scenarios, sweeps or SLOs differ, and capacity answers "
            "depend on them."
        )
    return {"names": names, "differ": bool(warning), "warning": warning}


def sweep_results(job: Job) -> list[Result]:
    """The sweep's levels, each with `decode_timed` and `client_flag` (what the load
    generator's lag says: "ok", "saturated" or "busy machine") for the pages."""
    levels = list(job.results.filter(kind=Result.Kind.SWEEP).order_by("concurrency"))
    for r in levels:
        r.decode_timed = decode_timed(r)
        r.client_flag = harness.client_flag((r.metrics or {}).get("diagnostics"), r.concurrency)
    return levels


def capacity_answer(job: Job) -> dict | None:
    """The largest measured concurrency whose TTFT p95 and per-user decode rate meet the
    suite's SLO: "serves N concurrent users with TTFT p95 ≤ X s and ≥ Y tok/s each"."""
    slo = job.plan.get("slo") or {}
    levels = [r for r in sweep_results(job) if r.ok and r.ttft_p95_s is not None]
    if not slo or not levels:
        return None
    min_tps = 1 / slo["tpot_s"]
    # A level whose decode is too short to time earns no credit: its rate is noise.
    timed = [r for r in levels if decode_timed(r)]
    meeting = [
        r for r in timed if r.ttft_p95_s <= slo["ttft_s"] and (r.decode_tps_p50 or 0) >= min_tps
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
    elif not timed:
        answer["text"] = (
            f"No capacity answer: the sweep's {job.plan['sweep']['output_tokens']}-token "
            "generations are too short to time a per-user decode rate."
        )
    else:
        answer["text"] = (
            f"No measured level meets TTFT p95 ≤ {slo['ttft_s']:g} s with ≥ {min_tps:.0f} tok/s "
            "per user."
        )
    answer["untimed_levels"] = len(levels) - len(timed)
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

    decode_series = series("decode_tps", "decode_tps_p50")
    # Too short to time: no measured point (the seed's published figure stays).
    decode_series[0]["values"] = [timed_decode_tps(r.result) for r in rows]
    decode_series[0]["notes"] = [None if r.decode_timed else "too short to time" for r in rows]
    return {
        "scenarios": labels,
        "metrics": {
            "ttft_s": {"unit": "s", "series": series("ttft_s", "ttft_p50_s")},
            "decode_tps": {"unit": "tok/s", "series": decode_series},
        },
    }


def curve_series(job: Job) -> dict:
    return {
        "label": f"job {job.pk} ({job.recipe.name}, {job.host.name})",
        "points": [
            {"concurrency": r.concurrency, "x": r.decode_tps_p50, "y": r.output_tps}
            for r in sweep_results(job)
            if timed_decode_tps(r) is not None and r.output_tps is not None
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
    # False: too short to time (harness.decode_too_short); the median above is then noise.
    ("decode_timed", lambda j, r: decode_timed(r)),
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
    """The results as CSV; text cells that a spreadsheet would run as a formula are
    neutralised (apps/core/csvsafe.py)."""
    return csv_text([key for key, _ in EXPORT_FIELDS], export_rows(jobs))


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
