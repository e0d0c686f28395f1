"""Reading a report GuideLLM wrote (`guidellm run … --output kind=json`, report schema
version 2, GuideLLM 0.8): each benchmark a level, for apps/benchmarks/imports.py.

The report is GuideLLM's `GenerativeBenchmarksReport` (guidellm/benchmark/schemas/report.py):
`metadata.version` 2, and `benchmarks[]`, each with `config.strategy` (its `type_`:
synchronous, concurrent with `streams`, throughput with `max_concurrency`, constant or
poisson with `rate`), `duration`, and `requests.successful` / `errored` / `incomplete`,
each request with `request_start_time`, `request_latency`, `time_to_first_token_ms`,
`prompt_tokens`, `output_tokens` and `info.error`. Tested on a report the real GuideLLM
wrote against sparksim (tests/benchmarks/test_guidellm_format.py).

What a GuideLLM report cannot give: the time between a request's tokens (it keeps the
first and last only), so an imported level has no ITL samples (`gaps` empty) and no
per-request chunk timeline; and a report may keep only a sample of its requests
(`config.sample_size`): the level is what the report kept.

Writing one (`report(job)`, the job page's "GuideLLM JSON"): every level of a job as a
benchmark of that schema, its requests as GuideLLM's `GenerativeRequestStats` built from
the stored rows and its `metrics` computed from them as GuideLLM computes them
(apps/benchmarks/guidellm_stats.py). The timeline: a request starts at the level's
start plus its row's `start`, its first token `ttft` later and its last token (its end:
the panel's E2E ends there) `e2e` later; an open-loop request was due `lag` before it
went (GuideLLM's `targeted_start`). Token iterations are the request's token-bearing
chunks when the level kept its chunk gaps. What the panel does not measure is left at
GuideLLM's own default or empty value, never filled with a figure: the scheduler's
internal times (queued, dequeued, resolve start, finalized: None, their averages -1.0),
the stream's other events (`request_iterations` 0, `first_request_iteration` and
`last_request_iteration` None), the first non-reasoning token (None: the panel's TTFT is
the first token of either kind), words and characters (the panel keeps no texts),
response ids, confidence intervals (`confidence: null`) and warnings (none ran). Two
stand-ins GuideLLM needs to place a request in time: `resolve_end` is the request's end,
and an errored request (the panel keeps no end for it) ends as it starts, with no
latency. Times are the host's seconds, simulated ones on a simulated Spark. Tested with
GuideLLM's own model and metrics code (tests/benchmarks/test_guidellm_export.py).
"""

from __future__ import annotations

import platform
import statistics

from apps.benchmarks import guidellm_stats
from apps.benchmarks.models import Job, Result
from apps.benchmarks.peer_files import (
    MAX_FILE_LEVELS,
    MAX_FILE_REQUESTS,
    FileProblem,
    ImportedLevel,
    number,
)

FORMAT = "GuideLLM"
CLOSED_LOOP = {"synchronous": "streams", "concurrent": "streams", "throughput": "max_concurrency"}
OPEN_LOOP = {"constant": None, "poisson": 1.0}  # their burstiness in vLLM's terms


def is_report(data) -> bool:
    """Does this JSON look like a GuideLLM report (its metadata and benchmarks)?"""
    return (
        isinstance(data, dict)
        and isinstance(data.get("benchmarks"), list)
        and isinstance(data.get("metadata"), dict)
        and "guidellm_version" in data["metadata"]
    )


def _row(request: dict, status: str, origin: float, where: str) -> dict:
    if not isinstance(request, dict):
        raise FileProblem(f"{where}: a request is not an object")
    ok = status == "successful"
    info = request.get("info") if isinstance(request.get("info"), dict) else {}
    latency = request.get("request_latency")
    ttft_ms = request.get("time_to_first_token_ms")
    out = request.get("output_tokens")
    prompt = request.get("prompt_tokens")
    if ok and (latency is None or ttft_ms is None or out is None):
        raise FileProblem(f"{where}: a successful request without its latency, TTFT or tokens")
    ttft = number(ttft_ms, f"{where}: time_to_first_token_ms") / 1000 if ok else None
    e2e = number(latency, f"{where}: request_latency") if ok else None
    out = int(number(out, f"{where}: output_tokens")) if out is not None else None
    start = request.get("request_start_time")
    start = number(start, f"{where}: request_start_time") if start is not None else origin
    error = info.get("error") or ("cancelled before it finished" if status == "incomplete" else "")
    return {
        "ttft": round(ttft, 6) if ok else None,
        "e2e": round(e2e, 6) if ok else None,
        "tpot": round((e2e - ttft) / (out - 1), 6) if ok and out and out > 1 else None,
        "output_tokens": out if ok else None,
        "prompt_tokens": None if prompt is None else int(number(prompt, f"{where}: prompt_tokens")),
        "ok": ok,
        "error": None if ok else f"{status}: {str(error)[:480]}",
        "start": round(max(start - origin, 0.0), 6),
        "lag": None,
        "gaps": [],  # GuideLLM keeps a request's first and last token times only
    }


def _level(bench, where: str, model: str, date: str) -> ImportedLevel:
    if not isinstance(bench, dict):
        raise FileProblem(f"{where}: not a JSON object")
    strategy = (bench.get("config") or {}).get("strategy") or {}
    kind = strategy.get("type_")
    if kind not in CLOSED_LOOP and kind not in OPEN_LOOP:
        raise FileProblem(
            f"{where}: a “{kind}” strategy; the panel imports synchronous, concurrent, "
            "throughput, constant and poisson benchmarks"
        )
    requests = bench.get("requests") or {}
    groups = [(s, requests.get(s) or []) for s in ("successful", "errored", "incomplete")]
    if any(not isinstance(group, list) for _, group in groups):
        raise FileProblem(f"{where}: requests.successful/errored/incomplete must be lists")
    count = sum(len(group) for _, group in groups)
    if count > MAX_FILE_REQUESTS:
        raise FileProblem(f"{where}: {count:,} requests; at most {MAX_FILE_REQUESTS:,} a level")
    starts = [r.get("request_start_time") for _, g in groups for r in g if isinstance(r, dict)]
    starts = [number(s, f"{where}: request_start_time") for s in starts if s is not None]
    origin = min(starts, default=0.0)
    rows = [_row(r, status, origin, where) for status, group in groups for r in group]
    rows.sort(key=lambda r: r["start"])
    ok = [r for r in rows if r["ok"]]
    if kind in CLOSED_LOOP:
        streams = strategy.get(CLOSED_LOOP[kind]) or (1 if kind == "synchronous" else None)
        cap = None if streams is None else int(number(streams, f"{where}: streams", minimum=1))
        rate = burst = None
    else:
        rate = number(strategy.get("rate"), f"{where}: rate")
        cap, burst = strategy.get("max_concurrency"), OPEN_LOOP[kind]
        cap = None if cap is None else int(number(cap, f"{where}: max_concurrency", minimum=1))
    return ImportedLevel(
        request_rate=rate,
        max_concurrency=cap,
        burstiness=burst,
        prompt_tokens=int(statistics.median([r["prompt_tokens"] or 0 for r in rows] or [0])),
        output_tokens=int(statistics.median([r["output_tokens"] for r in ok] or [0])),
        duration=number(bench.get("duration"), f"{where}: duration"),
        rows=rows,
        model_id=model,
        date=date,
        backend="openai-chat",
        label=f"GuideLLM {kind}",
        goodput=None,
    )


def levels_of(data, name: str) -> list[ImportedLevel]:
    """The levels of a GuideLLM report already read as JSON (imports.parse_file reads the
    upload once and tells the two formats apart); FileProblem says what is wrong."""
    if not is_report(data):
        raise FileProblem(f"{name} is not a GuideLLM report (no metadata and benchmarks)")
    version = data["metadata"].get("version")
    if version != 2:
        raise FileProblem(f"{name}: report schema version {version!r}; the panel reads version 2 "
                          "(GuideLLM 0.8)")  # fmt: skip
    benchmarks = data["benchmarks"]
    if not benchmarks:
        raise FileProblem(f"{name} holds no benchmarks")
    if len(benchmarks) > MAX_FILE_LEVELS:
        raise FileProblem(f"{name} has {len(benchmarks)} benchmarks; at most {MAX_FILE_LEVELS}")
    backend = ((data.get("config") or {}).get("spec") or {}).get("backend") or {}
    model = str(backend.get("model") or "")[:200]
    many = len(benchmarks) > 1
    return [
        _level(b, f"{name}, benchmark {i + 1}" if many else name, model, "")
        for i, b in enumerate(benchmarks)
    ]


# --- writing a job as a GuideLLM report ---------------------------------------------------

SCHEMA_VERSION = "0.8.1"  # the GuideLLM whose report schema the export follows
USAGE_FIELDS = ("text_tokens", "cached_tokens", "text_words", "text_characters", "image_tokens",
                "image_count", "image_pixels", "image_bytes", "video_tokens", "video_frames",
                "video_seconds", "video_bytes", "audio_tokens", "audio_samples",
                "audio_seconds", "audio_bytes", "tool_call_tokens",
                "mixed_content_tool_tokens", "tool_call_count")  # fmt: skip
TRANSIENT = {"percent": None, "value": None, "mode": "prefer_duration"}  # GuideLLM's default
REQUEST_FORMATS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class ExportProblem(ValueError):
    """Why a job cannot be written as a GuideLLM report, said so a person can act on it."""


def _usage(tokens: int | None) -> dict:
    """GuideLLM's UsageMetrics with the one count the panel keeps (tokens)."""
    return dict.fromkeys(USAGE_FIELDS) | {"text_tokens": tokens, "total_tokens": tokens}


def _timings(row: dict, start: float, schedule: bool, gaps_kept: bool) -> dict:
    ok = bool(row.get("ok")) and row.get("ttft") is not None and row.get("e2e") is not None
    first, last = (start + row["ttft"], start + row["e2e"]) if ok else (None, None)
    lag = row.get("lag")
    chunks = len(row.get("gaps") or []) + 1 if ok and gaps_kept and "gaps" in row else 0
    return {"targeted_start": start - lag if schedule and lag is not None else None,
            "predecessor_completed": None, "queued": None, "dequeued": None,
            "scheduled_at": None, "resolve_start": None, "request_start": start,
            "first_request_iteration": None, "first_token_iteration": first,
            "first_output_token_iteration": None, "last_token_iteration": last,
            "last_request_iteration": None, "request_iterations": 0,
            "token_iterations": chunks, "last_request_sent": None, "request_sent_sum": 0.0,
            "request_sent_count": 0, "token_received_sum": 0.0, "token_received_count": 0,
            "request_end": last, "resolve_end": last if ok else start,
            "finalized": None}  # fmt: skip


def _computed(t: dict, prompt: int | None, out: int | None) -> dict:
    """GenerativeRequestStats' computed fields, as its properties compute them."""
    start, end, targeted = t["request_start"], t["request_end"], t["targeted_start"]
    first, last = t["first_token_iteration"], t["last_token_iteration"]
    chunks = t["token_iterations"]
    ends_at = end if end is not None else t["resolve_end"]
    latency = None if end is None else end - start
    dispatch = None if targeted is None else start - targeted
    out = out if out is not None else (chunks or None)
    total = None if prompt is None and out is None else (prompt or 0) + (out or 0)
    return {
        "request_start_time": start, "request_end_time": ends_at, "request_latency": latency,
        "request_dispatch_delay": dispatch,
        "turn_predecessor_delay": None if dispatch is None else 0.0,
        "turn_scheduling_delay": dispatch,
        "request_scheduled_latency": None if targeted is None or end is None else end - targeted,
        "prompt_tokens": prompt, "cached_tokens": None, "output_tokens": out,
        "total_tokens": total,
        "time_to_first_token_ms": None if first is None else 1000 * (first - start),
        "time_to_last_round_trip_ms": None, "avg_round_trip_time_ms": None,
        "time_per_output_token_ms": 1000 * ((last or ends_at) - start) / out if out else None,
        "inter_token_latency_ms": 1000 * (last - first) / (out - 1)
        if first is not None and last is not None and out is not None and out > 1 else None,
        "tokens_per_second": total / latency if latency and total is not None else None,
        "output_tokens_per_second": out / latency if latency and out is not None else None,
        "time_to_first_output_token_ms": None,
        "iter_tokens_per_iteration": (out - 1.0) / (chunks - 1.0)
        if out is not None and out > 1 and chunks > 1 else None,
        "output_tokens_per_iteration": out / chunks if out is not None and chunks >= 1 else None,
    }  # fmt: skip


def request_stats(row: dict, *, origin: float, request_id: str, status: str, schedule: bool,
                  gaps_kept: bool) -> dict:  # fmt: skip
    """One stored row (Result.requests) as GuideLLM's GenerativeRequestStats JSON; `status`
    is successful, errored or incomplete, `origin` the level's start (epoch seconds; a row
    without a `start`, a request that was never sent, is placed there)."""
    timings = _timings(row, origin + (row.get("start") or 0.0), schedule, gaps_kept)
    ok = status == "successful"
    out = row.get("output_tokens") if ok else None
    info = {"request_id": request_id, "conversation_id": None, "history_len": 0,
            "turn_index": 0, "preceding_nodes": 0, "node_id": None, "agent_id": None,
            "parent_node_ids": [],
            "status": {"successful": "completed", "errored": "errored"}.get(status, "cancelled"),
            "scheduler_node_id": -1, "scheduler_process_id": -1, "scheduler_start_time": origin,
            "timings": timings,
            "settings": {"relative_timestamp": None, "requeue_delay": None,
                         "trace_duration": None},
            "error": None if ok else _reason(row, status), "traceback": None,
            "started_at": timings["request_start"],
            "completed_at": timings["request_end"] or timings["resolve_end"]}  # fmt: skip
    return {"type_": "generative_request_stats", "request_id": request_id, "response_id": None,
            "request_args": None, "output": None, "reasoning_output": None, "tool_calls": None,
            "info": info, "input_metrics": _usage(row.get("prompt_tokens")),
            "response_metrics": None, "output_metrics": _usage(out),
            **_computed(timings, row.get("prompt_tokens"), out)}  # fmt: skip


def _reason(row: dict, status: str) -> str:
    """A failed row's error, less the status the importer put before one it read from
    GuideLLM (the status says it again)."""
    error = str(row.get("error") or "failed")
    return error.removeprefix(f"{status}: ") or "failed"


def _status(row: dict) -> str:
    if row.get("ok"):
        return "successful"
    # A request the importer read from GuideLLM's `incomplete` goes back there.
    return "incomplete" if str(row.get("error") or "").startswith("incomplete:") else "errored"


def _traffic(job: Job, result: Result) -> tuple[dict, dict]:
    """The level's GuideLLM strategy and the profile that runs it: a closed loop is
    `concurrent` at its streams, a rate level `constant` or `poisson` at its rate and cap.
    Arrivals GuideLLM has no strategy for are refused rather than mislabelled."""
    where = f"level “{result.scenario}”"
    if result.kind != Result.Kind.RATE:
        if result.concurrency < 1:
            raise ExportProblem(f"{where} has no concurrency to give GuideLLM's streams")
        streams = result.concurrency
        return ({"type_": "concurrent", "worker_count": None, "max_concurrency": streams,
                 "streams": streams, "rampup_duration": 0.0},
                {"kind": "concurrent", "streams": [streams]})  # fmt: skip
    arrivals = job.plan.get("sweep", {}).get("arrivals", {})
    kind, ramp = arrivals.get("kind", "poisson"), arrivals.get("ramp_up_s") or 0.0
    if kind == "gamma" and (arrivals.get("burstiness") or 1.0) != 1.0:
        raise ExportProblem(
            f"{where} sent gamma arrivals (burstiness {arrivals['burstiness']:g}): GuideLLM has "
            "no strategy for them (constant and poisson only). The vllm bench JSON keeps them."
        )
    if kind != "constant" and ramp:
        raise ExportProblem(
            f"{where} ramped its Poisson arrivals up over {ramp:g} s: GuideLLM's poisson "
            "strategy has no ramp-up. The vllm bench JSON export keeps the level's numbers."
        )
    if result.request_rate is None:
        raise ExportProblem(f"{where} is a rate level without its rate")
    cap = result.concurrency or None
    if kind == "constant":
        return ({"type_": "constant", "worker_count": None, "max_concurrency": cap,
                 "rate": result.request_rate, "rampup_duration": ramp},
                {"kind": "constant", "rate": [result.request_rate], "max_concurrency": cap,
                 "rampup_duration": ramp})  # fmt: skip
    # random_seed is left to GuideLLM's default: the panel drew its arrivals itself.
    return ({"type_": "poisson", "worker_count": None, "max_concurrency": cap,
             "rate": result.request_rate},
            {"kind": "poisson", "rate": [result.request_rate], "max_concurrency": cap})  # fmt: skip


def _window(requests: dict, origin: float, window_s: float | None) -> tuple[float, float]:
    """The measured window: the first request's start to the level's end (its first send
    to its last answer, as the panel times its throughputs)."""
    every = [r for group in requests.values() for r in group]
    start = min((r["request_start_time"] for r in every), default=origin)
    end = max([r["request_end_time"] for r in every] + [start + (window_s or 0.0)])
    return start, end


def _scheduler(requests: dict, origin: float, start: float, end: float, kind: str) -> tuple:
    counts = {s: len(requests[s]) for s in guidellm_stats.STATUSES}
    counts["total"] = sum(counts.values())
    state = {"node_id": -1, "num_processes": -1, "start_time": origin, "end_time": end,
             "start_requests_time": start, "end_requests_time": end, "end_queuing_time": None,
             "end_queuing_constraints": {}, "end_processing_time": None,
             "end_processing_constraints": {}, "scheduler_constraints": {},
             "progress": {"remaining_requests": None, "total_requests": None,
                          "remaining_duration": None, "total_duration": None,
                          "stop_time": None},
             "created_requests": counts["total"], "queued_requests": 0, "pending_requests": 0,
             "processing_requests": 0, "processed_requests": counts["total"],
             "successful_requests": counts["successful"],
             "errored_requests": counts["errored"],
             "cancelled_requests": counts["incomplete"]}  # fmt: skip
    every = [r for group in requests.values() for r in group]

    def mean(key: str) -> float:  # GuideLLM's `running mean or -1.0`
        values = [r[key] for r in every if r[key] is not None]
        return (sum(values) / len(values) if values else 0.0) or -1.0

    unmeasured = dict.fromkeys(("queued_time_avg", "resolve_start_delay_avg",
                                "resolve_targeted_start_delay_avg", "request_start_delay_avg"),
                               -1.0)  # fmt: skip
    metrics = {"start_time": origin, "request_start_time": start, "measure_start_time": start,
               "measure_end_time": end, "request_end_time": end, "end_time": end,
               "requests_made": counts, "generation_delay": guidellm_stats.summary([]),
               **unmeasured, "request_targeted_start_delay_avg": mean("request_dispatch_delay"),
               "request_time_avg": mean("request_latency"), "resolve_end_delay_avg": -1.0,
               "resolve_time_avg": -1.0, "finalized_delay_avg": -1.0,
               "processed_delay_avg": -1.0, "dataset_incomplete": False,
               "strategy_type": kind}  # fmt: skip
    return state, metrics


def _origin(job: Job, result: Result) -> float:
    """The level's start (epoch seconds): when the harness began it, else the job's start
    (imported levels keep no start of their own)."""
    started = (result.metrics or {}).get("started")
    if isinstance(started, int | float) and not isinstance(started, bool) and started > 0:
        return float(started)
    return (job.started_at or job.queued_at).timestamp()


def _slo(slo) -> dict | None:
    """The job's SLO as GuideLLM's GoodputSLO: the panel's TPOT is GuideLLM's ITL (first to
    last token over the tokens after the first), which is what GoodputSLO.tpot_ms bounds."""
    slo = slo if isinstance(slo, dict) else {}
    out = {f"{key}_ms": slo[f"{key}_s"] * 1000 for key in ("ttft", "tpot")
           if isinstance(slo.get(f"{key}_s"), int | float) and slo[f"{key}_s"] > 0}  # fmt: skip
    return out or None


def _benchmark(job: Job, result: Result, index: int, backend: dict, slo) -> tuple[dict, dict]:
    """One level as (its benchmark, its entry in config.benchmarks)."""
    strategy, profile = _traffic(job, result)
    if result.prompt_tokens < 1:
        raise ExportProblem(f"level “{result.scenario}” has no prompt length for GuideLLM's data")
    stored, origin = result.metrics or {}, _origin(job, result)
    schedule, gaps_kept = "rate" in strategy, bool(stored.get("gaps_kept", True))
    requests: dict[str, list] = {s: [] for s in guidellm_stats.STATUSES}
    for i, row in enumerate(result.requests or []):
        status = _status(row)
        requests[status].append(request_stats(
            row, origin=origin, request_id=f"sparkpanel-job{job.pk}-level{result.pk}-{i}",
            status=status, schedule=schedule, gaps_kept=gaps_kept))  # fmt: skip
    window = stored.get("window_s") if isinstance(stored.get("window_s"), int | float) else None
    start, end = _window(requests, origin, window)
    state, scheduler_metrics = _scheduler(requests, origin, start, end, strategy["type_"])
    dataset = (job.plan.get("dataset") or {}).get("kind") if result.kind != "scenario" else None
    entry = {"profile": profile,
             "data": [{"kind": "synthetic_text", "prompt_tokens": result.prompt_tokens,
                       "output_tokens": result.output_tokens or None}],
             "constraints": [{"kind": "max_requests", "count": len(result.requests)}]
             if result.requests else []}  # fmt: skip
    config = {"id_": f"sparkpanel-job{job.pk}-level{result.pk}",
              "run_id": f"sparkpanel-job{job.pk}", "run_index": index, "strategy": strategy,
              "constraints": {}, "sample_size": None,
              "warmup": TRANSIENT, "cooldown": TRANSIENT, "prefer_response_metrics": True,
              "slo": slo, "confidence": None, "warnings": [], "profile": profile,
              "requests": {"kind": "sparkpanel", "scenario": result.scenario,
                           "dataset": dataset or "synthetic",
                           "prompt_tokens": result.prompt_tokens,
                           "output_tokens": result.output_tokens},
              "backend": backend, "environment": {},
              "sparkpanel_level": result.pk, "sparkpanel_kind": result.kind,
              "sparkpanel_complete": result.complete,
              "sparkpanel_time_scale": stored.get("time_scale", 1.0),
              "sparkpanel_gaps_kept": gaps_kept}  # fmt: skip
    benchmark = {
        "type_": "generative_benchmark", "config": config, "scheduler_state": state,
        "scheduler_metrics": scheduler_metrics,
        "metrics": guidellm_stats.metrics(requests, start, end, slo=slo, schedule=schedule),
        "requests": {**requests, "total": None}, "warnings": [],
        "start_time": start, "end_time": end, "duration": end - start,
        "warmup_duration": 0.0, "cooldown_duration": 0.0,
    }  # fmt: skip
    return benchmark, entry


def report(job: Job) -> dict:
    """The job as GuideLLM's report JSON (`GenerativeBenchmarksReport`, schema version 2):
    one benchmark a level, in the order they ran; ExportProblem says why it cannot be."""
    results = list(job.results.order_by("pk"))
    if not results:
        raise ExportProblem(f"Job {job.pk} has no measured levels yet: nothing to export.")
    endpoint = job.plan.get("endpoint", "chat")
    backend = {
        "kind": "openai_http",
        "target": "",  # GuideLLM has no default; the server's address is not exported
        "model": job.recipe.model_id,
        "request_format": REQUEST_FORMATS.get(endpoint, REQUEST_FORMATS["chat"]),
    }
    slo = _slo(job.plan.get("slo"))
    levels = [_benchmark(job, r, i, backend, slo) for i, r in enumerate(results)]
    simulated = bool(job.context.get("simulated", False))
    labels = {"sparkpanel_job": str(job.pk), "sparkpanel_host": job.host.name,
              "sparkpanel_recipe": job.recipe.name, "sparkpanel_model": job.recipe.model_id,
              "sparkpanel_simulated": "true" if simulated else "false"}  # fmt: skip
    metrics_args = {"kind": "generative", "confidence": None, "slo": slo, "warnings": []}
    return {
        "metadata": {"version": 2, "guidellm_version": f"{SCHEMA_VERSION}+sparkpanel",
                     "python_version": platform.python_version(),
                     "platform": platform.platform()},
        "config": {"metadata": {"labels": labels},
                   "spec": {"backend": backend, **levels[0][1], "metrics": metrics_args},
                   "benchmarks": [entry for _, entry in levels]},
        "benchmarks": [benchmark for benchmark, _ in levels],
        "conclusions": [],
    }  # fmt: skip


def filename(job: Job) -> str:
    return f"sparkpanel-job-{job.pk}-guidellm.json"
