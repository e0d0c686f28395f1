"""Results measured elsewhere, imported as read-only jobs that compare beside the panel's own.

A file `vllm bench serve --save-result --save-detailed` wrote (one run, or one a line with
--append-result — the panel's own "vllm bench JSON" export is such a file), or a JSON report
of GuideLLM's (apps/benchmarks/guidellm_format.py), becomes a job in state done: each run a
level (a closed loop, `request_rate: "inf"`, is a concurrency level at its --max-concurrency;
a rate a request-rate level), with the per-request rows, the headline numbers computed from
them as the panel computes its own, and a plan built from the file so the job page, Compare
and the exports read it as any job. It has no suite, never runs and cannot be cancelled; the
member names the recipe and the Spark it was measured on.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from apps.benchmarks import guidellm_format, live, selectors, vllm_bench
from apps.benchmarks.harness import percentiles, summarize
from apps.benchmarks.models import J, Job, Result, Suite
from apps.benchmarks.peer_files import ImportedLevel, read_documents


def parse_file(raw: bytes, name: str) -> tuple[str, list[ImportedLevel]]:
    """(format, levels) of an uploaded file, read once: a GuideLLM report, else a
    `vllm bench serve` file; FileProblem says why it does not read."""
    documents = read_documents(raw, name)
    if len(documents) == 1 and guidellm_format.is_report(documents[0]):
        return guidellm_format.FORMAT, guidellm_format.levels_of(documents[0], name)
    return vllm_bench.FORMAT, vllm_bench.levels_of(documents, name)


def _default(field: str) -> float:
    return Suite._meta.get_field(field).default


def _concurrency(level: ImportedLevel) -> int:
    """A closed loop's streams: its --max-concurrency, or every request at once (vLLM sends
    them all when there is none)."""
    return level.max_concurrency or len(level.rows)


def _plan(name: str, source: str, levels: list[ImportedLevel], slo: dict) -> dict:
    rates = [lv.request_rate for lv in levels if lv.request_rate is not None]
    first = levels[0]
    # an open loop without a gamma shape (burstiness None) sent constant arrivals: GuideLLM's
    # "constant", and the panel's own vLLM export of a constant level
    if rates and first.burstiness is None:
        kind = "constant"
    else:
        kind = "poisson" if (first.burstiness or 1.0) == 1.0 else "gamma"
    return {
        "name": f"Imported: {name}"[:120],
        "imported": {
            "format": source,
            "file": name,
            "date": first.date,
            "label": first.label,
            "backend": first.backend,
            "model_id": first.model_id,
        },
        "scenarios": [],
        "repetitions": 0,
        "warmup_requests": 0,
        "warm_prefix": False,
        "endpoint": "completions" if first.backend in ("openai", "vllm") else "chat",
        "sweep": {
            "enabled": True,
            "mode": "rate" if rates else "concurrency",
            "prompt_tokens": first.prompt_tokens,
            "output_tokens": first.output_tokens,
            "levels": sorted({_concurrency(lv) for lv in levels if lv.request_rate is None}),
            "rates": sorted(rates),
            "requests_per_level": max(len(lv.rows) for lv in levels),
            "arrivals": {
                "kind": kind,
                "burstiness": first.burstiness,
                "max_concurrency": first.max_concurrency,
                "ramp_up_s": 0,
                "seed": None,
            },
        },
        "slo": slo,
    }


def _result(job: Job, level: ImportedLevel) -> Result:
    rows = level.rows
    ok = [r for r in rows if r["ok"]]
    ttfts = [r["ttft"] for r in ok]
    decode = [1 / r["tpot"] for r in ok if r["tpot"]]
    prefill = [r["prompt_tokens"] / r["ttft"] for r in ok if r["ttft"] and r["prompt_tokens"]]
    out_tokens = sum(r["output_tokens"] or 0 for r in ok)
    window = level.duration or None
    rate = level.request_rate is not None
    metrics = {
        "imported": True,
        "time_scale": 1.0,
        "window_s": window,
        "sent": len(rows),
        "ok": len(ok),
        "failed": len(rows) - len(ok),
        "ttft": summarize(ttfts),
        "e2e": summarize(r["e2e"] for r in ok),
        "tpot": summarize(r["tpot"] for r in ok),
        "itl": summarize(g for r in ok for g in r["gaps"]),
        "decode_tok_s": summarize(decode),
        "prefill_tok_s": summarize(prefill),
        "request_throughput": len(ok) / window if window else None,
        "output_throughput": out_tokens / window if window else None,
        "goodput": level.goodput,
        "gaps_kept": any(r["gaps"] for r in ok) or not ok,
        "decode_timed": True,
    }
    return Result(
        job=job,
        kind=Result.Kind.RATE if rate else Result.Kind.SWEEP,
        scenario=f"rate {level.request_rate:g}/s" if rate else f"concurrency {_concurrency(level)}",
        prompt_tokens=level.prompt_tokens,
        output_tokens=level.output_tokens,
        concurrency=(level.max_concurrency or 0) if rate else _concurrency(level),
        request_rate=level.request_rate,
        ok=len(ok),
        failed=len(rows) - len(ok),
        complete=True,
        ttft_p50_s=metrics["ttft"]["p50"],
        ttft_p95_s=percentiles(ttfts, (95,))["p95"],
        ttft_p99_s=metrics["ttft"]["p99"],
        e2e_p50_s=metrics["e2e"]["p50"],
        decode_tps_p50=metrics["decode_tok_s"]["p50"],
        prefill_tps_p50=metrics["prefill_tok_s"]["p50"],
        output_tps=metrics["output_throughput"],
        request_rps=metrics["request_throughput"],
        goodput_rps=level.goodput,
        metrics=metrics,
        requests=rows,
    )


def job_import(
    *,
    levels: list[ImportedLevel],
    name: str,
    source: str = vllm_bench.FORMAT,
    recipe,
    host,
    user,
    note: str = "",
    slo_ttft_s: float | None = None,
    slo_tpot_s: float | None = None,
) -> Job:
    """A read-only job from a file's levels (vllm_bench.parse: the file is checked whole
    first, so nothing is saved from a bad one)."""
    slo = {"ttft_s": slo_ttft_s or _default("slo_ttft_s"),
           "tpot_s": slo_tpot_s or _default("slo_tpot_s")}  # fmt: skip
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.create(
            suite=None, recipe=recipe, host=host, queued_by=user, state=J.DONE,
            note=note[:200], imported_from=f"{source}: {name}"[:240],
            plan=_plan(name, source, levels, slo), queued_at=now, started_at=now,
            finished_at=now,
            context={"imported": True, "format": source, "file": name[:200],
                     "model_id": levels[0].model_id, "host": host.name},
        )  # fmt: skip
        Result.objects.bulk_create(_result(job, level) for level in levels)
        job.summary = selectors.summary_of(selectors.capacity_answer(job))
        job.save(update_fields=["summary"])
        # Open Benchmarks pages list it among the finished jobs (apps/benchmarks/live.py).
        transaction.on_commit(lambda: live.push_job(job.pk))
    return job
