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
"""

from __future__ import annotations

import statistics

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
