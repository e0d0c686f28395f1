"""A measured level as the file `vllm bench serve --save-result --save-detailed` writes.

The keys, their order and their meaning are vLLM 0.33's (vllm/benchmarks/serve.py:
`benchmark()` builds the result, `main()` adds the setup and traffic keys; tested against a
file the real `vllm bench serve` wrote, tests/benchmarks/test_vllm_bench_format.py):

- setup: `date` (`%Y%m%d-%H%M%S`), `endpoint_type`/`backend` (`openai-chat` for the chat
  endpoint, `openai` for completions), `label`, `model_id`, `tokenizer_id`, `num_prompts`;
- traffic: `request_rate` (`"inf"` for a closed loop, as vLLM writes it), `burstiness`,
  `max_concurrency`;
- results: `duration`, `completed`, `failed`, token totals and throughputs, the per-request
  lists (`input_lens`, `output_lens`, `ttfts`, `itls`, `latencies`, `start_times`,
  `generated_texts`, `errors`) and mean/median/std/p99 of TTFT, TPOT, ITL and E2EL in ms.

What differs, and why:
- times are the host's seconds, as everywhere in the panel: on a simulated Spark that is
  simulated time (`sparkpanel_time_scale` says how fast it ran);
- `generated_texts` are empty strings: the panel does not keep answers;
- `queue_times` (vLLM: the wait for a `--max-concurrency` slot) are 0 in a closed loop,
  where a stream sends its next request as soon as its answer ends, and how late each
  send went after it was due in an open loop;
- `itls` are empty for a level too large to keep its chunk gaps (`MAX_STORED_GAPS`) and for
  results stored before the panel kept them (`sparkpanel_itls_kept` is False then);
- `sparkpanel_*` keys carry the job, host, level and recipe (vLLM's `--metadata KEY=VALUE`
  adds top-level keys the same way).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from apps.benchmarks.harness import percentiles
from apps.benchmarks.harness.types import MAX_STORED_GAPS
from apps.benchmarks.models import Job, Result
from apps.benchmarks.peer_files import (
    MAX_FILE_LEVELS,
    MAX_FILE_REQUESTS,
    FileProblem,
    ImportedLevel,
    number,
    read_documents,
)

FORMAT = "vllm bench serve"
BACKENDS = {"chat": "openai-chat", "completions": "openai"}  # vLLM's names for the two


def _ms_stats(name: str, seconds: Sequence[float]) -> dict:
    """vLLM's `mean_/median_/std_/p99_<name>_ms` (numpy's mean, median, population std and
    linear percentile, which `percentiles` matches); 0 for an empty list, as vLLM's
    `np.mean(x or 0)` gives."""
    xs = [s * 1000 for s in seconds]
    if not xs:
        return {f"mean_{name}_ms": 0.0, f"median_{name}_ms": 0.0, f"std_{name}_ms": 0.0,
                f"p99_{name}_ms": 0.0}  # fmt: skip
    return {
        f"mean_{name}_ms": statistics.fmean(xs),
        f"median_{name}_ms": statistics.median(xs),
        f"std_{name}_ms": statistics.pstdev(xs),
        f"p99_{name}_ms": percentiles(xs, (99,))["p99"],
    }


def _traffic(job: Job, result: Result) -> dict:
    arrivals = job.plan.get("sweep", {}).get("arrivals", {})
    if result.kind != Result.Kind.RATE:
        return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": result.concurrency}
    kind = arrivals.get("kind", "poisson")
    burstiness = {"poisson": 1.0, "gamma": arrivals.get("burstiness") or 1.0}.get(kind)
    return {
        "request_rate": result.request_rate,
        "burstiness": burstiness,  # constant arrivals have no gamma shape: None
        "max_concurrency": result.concurrency or None,
    }


def _peaks(rows: list[dict]) -> tuple[float, int]:
    """vLLM's `max_output_tokens_per_s` (most tokens finished in one whole second of the
    run) and `max_concurrent_requests` (most requests in flight in any second), from each
    request's start, TTFT and chunk gaps."""
    tokens: dict[int, int] = {}
    in_flight: dict[int, int] = {}
    for row in rows:
        if not row["ok"] or row.get("start") is None or row["ttft"] is None:
            continue
        t = row["start"] + row["ttft"]
        tokens[math.floor(t)] = tokens.get(math.floor(t), 0) + 1
        for gap in row.get("gaps") or []:
            t += gap
            tokens[math.floor(t)] = tokens.get(math.floor(t), 0) + 1
        for second in range(math.floor(row["start"]), math.floor(row["start"] + row["e2e"]) + 1):
            in_flight[second] = in_flight.get(second, 0) + 1
    return float(max(tokens.values(), default=0)), max(in_flight.values(), default=0)


def save_result(job: Job, result: Result) -> dict:
    """The level as vLLM's detailed result file (a dict ready for json.dump)."""
    rows = result.requests
    ok = [r for r in rows if r["ok"]]
    metrics = result.metrics or {}
    started = job.started_at or job.queued_at
    endpoint = job.plan.get("endpoint", "chat")
    total_in = sum(r["prompt_tokens"] or 0 for r in ok)
    total_out = sum(r["output_tokens"] or 0 for r in ok)
    duration = metrics.get("window_s") or 0.0
    max_tps, max_concurrent = _peaks(rows)
    kept = bool(rows) and all("gaps" in r for r in rows) and metrics.get("gaps_kept", True)
    return {
        "date": started.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKENDS.get(endpoint, "openai-chat"),
        "backend": BACKENDS.get(endpoint, "openai-chat"),
        "label": f"sparkpanel job {job.pk}: {result.scenario}",
        "model_id": job.recipe.model_id,
        "tokenizer_id": job.recipe.model_id,
        "num_prompts": len(rows),
        **_traffic(job, result),
        "duration": duration,
        "completed": len(ok),
        "failed": len(rows) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "request_goodput": metrics.get("goodput"),
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
        "input_lens": [r["prompt_tokens"] or 0 for r in rows],
        "output_lens": [r["output_tokens"] or 0 for r in rows],
        "ttfts": [r["ttft"] or 0.0 for r in rows],
        "itls": [r.get("gaps") or [] for r in rows],
        "latencies": [r["e2e"] or 0.0 for r in rows],
        "start_times": [r.get("start") or 0.0 for r in rows],
        "queue_times": [r.get("lag") or 0.0 for r in rows],
        "generated_texts": ["" for _ in rows],
        "errors": ["" if r["ok"] else (r["error"] or "failed") for r in rows],
        "max_output_tokens_per_s": max_tps,
        "max_concurrent_requests": max_concurrent,
        "rtfx": 0.0,  # vLLM's real-time factor is for audio models: 0 for text, as it writes
        **_ms_stats("ttft", [r["ttft"] for r in ok if r["ttft"] is not None]),
        **_ms_stats("tpot", [r["tpot"] for r in ok if r["tpot"] is not None]),
        **_ms_stats("itl", [g for r in ok for g in r.get("gaps") or []]),
        **_ms_stats("e2el", [r["e2e"] for r in ok if r["e2e"] is not None]),
        "sparkpanel_job": job.pk,
        "sparkpanel_level": result.pk,
        "sparkpanel_kind": result.kind,
        "sparkpanel_host": job.host.name,
        "sparkpanel_recipe": job.recipe.name,
        "sparkpanel_simulated": bool(job.context.get("simulated", False)),
        "sparkpanel_time_scale": metrics.get("time_scale", 1.0),
        "sparkpanel_itls_kept": kept,
    }


def filename(job: Job, result: Result) -> str:
    """As `vllm bench serve` names its files: backend, rate, concurrency, model, date."""
    rate = "inf" if result.request_rate is None else f"{result.request_rate:g}"
    model = job.recipe.model_id.split("/")[-1]
    return (
        f"sparkpanel-job{job.pk}-level{result.pk}-{rate}qps-"
        f"concurrency{result.concurrency}-{model}.json"
    )


# --- reading a file `vllm bench serve` wrote ---------------------------------------------

PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")


def _rows(data: dict, where: str) -> list[dict]:
    n = len(data["ttfts"])
    if n > MAX_FILE_REQUESTS:
        raise FileProblem(f"{where}: {n:,} requests; at most {MAX_FILE_REQUESTS:,} a level")
    for key in PER_REQUEST:
        if not isinstance(data.get(key), list) or len(data[key]) != n:
            raise FileProblem(
                f"{where}: “{key}” must list one entry per request ({n}); was the file "
                "written with --save-detailed?"
            )
    starts = [number(s, f"{where}: start_times") for s in data["start_times"]]
    origin = min(starts, default=0.0)
    rows = []
    for i in range(n):
        error = data["errors"][i]
        if not isinstance(error, str):
            raise FileProblem(f"{where}: errors[{i}] is not text")
        ok = error == ""
        ttft = number(data["ttfts"][i], f"{where}: ttfts[{i}]")
        latency = number(data["latencies"][i], f"{where}: latencies[{i}]")
        out = int(number(data["output_lens"][i], f"{where}: output_lens[{i}]"))
        gaps = data["itls"][i]
        if not isinstance(gaps, list):
            raise FileProblem(f"{where}: itls[{i}] is not a list")
        gaps = [round(number(g, f"{where}: itls[{i}]"), 6) for g in gaps]
        rows.append({
            "ttft": round(ttft, 6) if ok else None,
            "e2e": round(latency, 6) if ok else None,
            "tpot": round((latency - ttft) / (out - 1), 6) if ok and out > 1 else None,
            "output_tokens": out if ok else None,
            "prompt_tokens": int(number(data["input_lens"][i], f"{where}: input_lens[{i}]")),
            "ok": ok,
            "error": None if ok else error[:500],
            "start": round(starts[i] - origin, 6),
            "lag": None,
            "gaps": gaps if ok else [],
        })  # fmt: skip
    if sum(len(r["gaps"]) for r in rows) > MAX_STORED_GAPS:
        for row in rows:  # as a level measured here: too many to keep
            row["gaps"] = []
    return rows


def _level(data, where: str) -> ImportedLevel:
    if not isinstance(data, dict):
        raise FileProblem(f"{where}: not a JSON object")
    missing = [k for k in ("duration", "completed", "ttfts", "request_rate") if k not in data]
    if missing:
        raise FileProblem(
            f"{where}: no {', '.join(missing)} — not a file of `vllm bench serve --save-result "
            "--save-detailed`"
        )
    duration = number(data["duration"], f"{where}: duration")
    rows = _rows(data, where)
    rate = data["request_rate"]
    rate = None if rate in ("inf", None) else number(rate, f"{where}: request_rate")
    cap = data.get("max_concurrency")
    cap = None if cap is None else int(number(cap, f"{where}: max_concurrency", minimum=1))
    burst = data.get("burstiness")
    ok = [r for r in rows if r["ok"]]
    return ImportedLevel(
        request_rate=rate,
        max_concurrency=cap,
        burstiness=None if burst is None else number(burst, f"{where}: burstiness"),
        prompt_tokens=int(statistics.median([r["prompt_tokens"] for r in rows] or [0])),
        output_tokens=int(statistics.median([r["output_tokens"] for r in ok] or [0])),
        duration=duration,
        rows=rows,
        model_id=str(data.get("model_id") or "")[:200],
        date=str(data.get("date") or "")[:40],
        backend=str(data.get("backend") or data.get("endpoint_type") or "")[:40],
        label=str(data.get("label") or "")[:200],
        goodput=None
        if data.get("request_goodput") is None
        else number(data["request_goodput"], f"{where}: request_goodput"),
    )


def parse(raw: bytes, name: str = "the file") -> list[ImportedLevel]:
    """The levels of a `vllm bench serve --save-result --save-detailed` file: one JSON
    object, or one a line (`--append-result`, and this panel's own job export)."""
    return levels_of(read_documents(raw, name), name)


def levels_of(objects: list, name: str) -> list[ImportedLevel]:
    """The levels of a file already read (peer_files.read_documents): one run an object,
    or a JSON array of them."""
    if len(objects) == 1 and isinstance(objects[0], list):
        objects = objects[0]  # a JSON array of results
    if len(objects) > MAX_FILE_LEVELS:
        raise FileProblem(f"{name} has {len(objects)} results; at most {MAX_FILE_LEVELS}")
    many = len(objects) > 1
    return [_level(o, f"{name}, result {i + 1}" if many else name) for i, o in enumerate(objects)]
