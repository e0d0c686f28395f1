"""The harness beside its peers, against one sparksim's ground truth: `vllm bench serve`
(vLLM 0.33's own client), GuideLLM 0.8.1 and AIPerf 0.13, each sending the same traffic to
the same sparksim server — closed loops of 1, 8 and 64 streams and one open-loop Poisson
rate — one after another, interleaved level by level and repeat by repeat.

sparksim records when it wrote every token-bearing SSE chunk (`GET /sparksim/trace`,
CLOCK_MONOTONIC); every client here stamps its own receive times, on the same machine:

- **TTFT error** = the client's time of the first token − sparksim's write time of it, ms
  (transport + the client's own delay);
- **ITL error** = |the client's mean gap between a request's token chunks − sparksim's|, ms,
  per request (every client reports its first and last token; per-gap figures need each
  chunk's time, which only the harness, `vllm bench serve` and AIPerf keep: "gap err p99");
- **CPU per request** = the client's CPU time (all its processes) while its requests ran,
  ÷ its requests (start-up and imports left out: sampled every 50 ms).

Clocks: the harness and `vllm bench serve` stamp `time.monotonic`/`perf_counter` (the
trace's clock); GuideLLM and AIPerf stamp wall time (`time.time`), turned into the
monotonic clock by the offset measured here (microseconds apart). Matching a client's
request to its trace: by the response id where the client keeps it (the harness,
GuideLLM); otherwise in order of first-token time (a client that keeps no id: the k-th
first token it received is paired with the k-th one sparksim wrote in its window).

sparksim (and this process, whose CPU sampler wakes every 50 ms) is pinned to CPU 0 and
every client to CPU 1 (taskset). Needs the peers' venvs: `tools/vllm_env.sh all` (vLLM
0.33, and the tiny model for a tokenizer) and `tools/peers_env.sh all`. Run with `make bench`
(or `python -m bench.peers_accuracy`; `--tools` / `--levels` to narrow it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from bench._stack import ROOT, free_port, pct, pin, start_sparksim

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
PROMPT, OUTPUT = 128, 32
VLLM = ROOT / "var" / "vllm-0.33.0" / "bin" / "vllm"
GUIDELLM = ROOT / "var" / "guidellm-0.8.1" / "bin" / "guidellm"
AIPERF = ROOT / "var" / "aiperf-0.13.0" / "bin" / "aiperf"
TOOLS = ("harness", "vllm", "guidellm", "aiperf")
CPU_SAMPLE_S = 0.05
HF_HOME = ROOT / "var" / "hf-home"  # the tiny model's cache (tests/real_vllm/fixtures.py)


def tokenizer() -> str:
    """A real tokenizer for the peers' synthetic prompts (sparksim counts its own)."""
    sys.path.insert(0, str(ROOT))
    from tests.real_vllm.fixtures import ensure_tiny_model

    return str(ensure_tiny_model())


# --- the clients ------------------------------------------------------------------------------


def level_args(level: str) -> tuple[int | None, float | None, int]:
    """'1', '8', '64' (streams) or 'r20' (Poisson, 20 requests/s): (streams, rate, requests)."""
    if level.startswith("r"):
        rate = float(level[1:])
        return None, rate, max(64, int(rate * 8))
    streams = int(level)
    return streams, None, max(256, streams * 4)


def harness_argv(url: str, level: str, out: Path, tok: str) -> list[str]:
    return [sys.executable, "-m", "bench.peers_accuracy", "--harness-worker", url, level,
            str(out)]  # fmt: skip


def vllm_argv(url: str, level: str, out: Path, tok: str) -> list[str]:
    streams, rate, n = level_args(level)
    shape = ["--max-concurrency", str(streams), "--request-rate", "inf"] if streams else [
        "--request-rate", str(rate), "--burstiness", "1"]  # fmt: skip
    return [
        str(VLLM), "bench", "serve", "--backend", "openai-chat", "--base-url", url,
        "--endpoint", "/v1/chat/completions", "--model", MODEL, "--tokenizer", tok,
        "--dataset-name", "random", "--input-len", str(PROMPT), "--output-len", str(OUTPUT),
        "--ignore-eos", "--num-prompts", str(n), *shape, "--disable-tqdm", "--save-result",
        "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
        "--seed", "1",
    ]  # fmt: skip


def guidellm_argv(url: str, level: str, out: Path, tok: str) -> list[str]:
    streams, rate, n = level_args(level)
    profile = f"kind=concurrent,streams={streams}" if streams else f"kind=poisson,rate={rate}"
    return [
        str(GUIDELLM), "run", "--backend", f"kind=openai_http,target={url},model={MODEL}",
        "--profile", profile, "--constraint", f"kind=max_requests,count={n}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT},output_tokens={OUTPUT}",
        "--tokenizer", f"kind=huggingface_auto,model={tok}",
        "--output", f"kind=json,path={out}", "--disable-progress",
    ]  # fmt: skip


def aiperf_argv(url: str, level: str, out: Path, tok: str) -> list[str]:
    # Offline, AIPerf 0.13 takes a tokenizer by its hub name from the HF cache (HF_HOME is
    # set for every client) and refuses a folder path.
    tok = "/".join(Path(tok).parent.parent.name.split("--")[1:])
    streams, rate, n = level_args(level)
    shape = ["--concurrency", str(streams)] if streams else [
        "--request-rate", str(rate), "--arrival-pattern", "poisson"]  # fmt: skip
    return [
        str(AIPERF), "profile", "--model", MODEL, "--url", url, "--endpoint-type", "chat",
        "--streaming", "--tokenizer", tok, "--synthetic-input-tokens-mean", str(PROMPT),
        "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(OUTPUT),
        "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
        "--request-count", str(n), *shape, "--no-server-metrics", "--no-gpu-telemetry",
        "--artifact-dir", str(out.parent), "--ui-type", "none", "--random-seed", "1",
    ]  # fmt: skip


ARGV = {"harness": harness_argv, "vllm": vllm_argv, "guidellm": guidellm_argv,
        "aiperf": aiperf_argv}  # fmt: skip


# --- what each client recorded, as (id or None, [chunk receive times]) -----------------------


def harness_records(out: Path, _offset: float) -> list[dict]:
    return json.loads(out.read_text())


def vllm_records(out: Path, _offset: float) -> list[dict]:
    data = json.loads(out.read_text())
    records = []
    errors = data.get("errors") or [""] * len(data["ttfts"])
    for start, ttft, itls, error in zip(data["start_times"], data["ttfts"], data["itls"], errors,
                                        strict=False):  # fmt: skip
        if error or not ttft:  # an error text: the request failed
            continue
        first = start + ttft  # perf_counter: CLOCK_MONOTONIC, the trace's clock
        records.append({"id": None, "chunks": list(itertools.accumulate(itls, initial=first))})
    return records


def guidellm_records(out: Path, offset: float) -> list[dict]:
    data = json.loads(out.read_text())
    records = []
    for bench in data["benchmarks"]:
        for request in bench["requests"]["successful"]:
            timings = request["info"]["timings"]
            first, last = timings.get("first_token_iteration"), timings.get("last_token_iteration")
            if first is None:
                continue
            records.append({"id": request.get("response_id"), "first": first - offset,
                            "last": None if last is None else last - offset})  # fmt: skip
    return records


def aiperf_records(out: Path, offset: float) -> list[dict]:
    """AIPerf's per-request records (profile_export.jsonl): `request_start_ns` on the wall
    clock (its perf_counter-anchored clock), TTFT and each inter-chunk latency in ms."""
    path = next(out.parent.rglob("profile_export.jsonl"))
    records = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        meta, metrics = row.get("metadata") or {}, row.get("metrics") or {}
        if row.get("error") or "time_to_first_token" not in metrics:
            continue
        first = meta["request_start_ns"] / 1e9 + metrics["time_to_first_token"]["value"] / 1e3
        gaps = (metrics.get("inter_chunk_latency") or {}).get("value") or []
        chunks = list(itertools.accumulate((g / 1e3 for g in gaps), initial=first - offset))
        records.append({"id": None, "chunks": chunks})
    return records


RECORDS = {"harness": harness_records, "vllm": vllm_records, "guidellm": guidellm_records,
           "aiperf": aiperf_records}  # fmt: skip


# --- running one client, its CPU, its traces ---------------------------------------------------


class TreeCPU(threading.Thread):
    """Samples the CPU time of a process and its children every CPU_SAMPLE_S."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self.seen: dict[int, float] = {}  # pid → last CPU seen (a child that exits keeps it)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(psutil.Error):
                for proc in [self.root, *self.root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        t = proc.cpu_times()
                        self.seen[proc.pid] = t.user + t.system
            self.samples.append((time.monotonic(), sum(self.seen.values())))
            self.stop.wait(CPU_SAMPLE_S)

    def between(self, start: float, end: float) -> float:
        """CPU seconds spent from `start` to `end` (interpolated samples)."""

        def at(t: float) -> float:
            if not self.samples or t <= self.samples[0][0]:
                return self.samples[0][1] if self.samples else 0.0
            for (t0, c0), (t1, c1) in itertools.pairwise(self.samples):
                if t0 <= t <= t1:
                    return c0 + (c1 - c0) * (t - t0) / (t1 - t0 or 1)
            return self.samples[-1][1]

        return max(at(end) - at(start), 0.0)


def traces_since(url: str, since: float) -> list[dict]:
    """sparksim's traces of the requests that started after `since` (monotonic)."""
    with httpx.Client(base_url=url, timeout=30) as http:
        ids = http.get("/sparksim/trace", params={"recent": 1000}).json()["ids"]
        found: dict[str, dict] = {}
        for i in range(0, len(ids), 200):
            got = http.get("/sparksim/trace", params={"ids": ",".join(ids[i : i + 200])})
            found.update(got.json()["traces"])
    return sorted((t for t in found.values() if t["started_at"] >= since and t["chunks"]),
                  key=lambda t: t["first_token_at"])  # fmt: skip


def run_client(tool: str, url: str, level: str, tok: str, cpu: int | None) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"peers-{tool}-") as tmp:
        out = Path(tmp) / "out.json"
        argv = [*(pin(cpu) if cpu is not None else []), *ARGV[tool](url, level, out, tok)]
        offset = time.time() - time.monotonic()
        since = time.monotonic()
        env = {**os.environ, "OPENAI_API_KEY": "unused", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(HF_HOME),
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        log = Path(tmp) / "log.txt"
        with log.open("w") as sink:
            proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=sink, stderr=subprocess.STDOUT)
            sampler = TreeCPU(proc.pid)
            sampler.start()
            try:
                code = proc.wait(timeout=900)
            finally:
                sampler.stop.set()
                sampler.join()
        if code != 0:
            raise RuntimeError(f"{tool} at {level} exited {code}:\n{log.read_text()[-3000:]}")
        records = RECORDS[tool](out, offset)
        traces = traces_since(url, since)
    return score(records, traces, sampler)


def score(records: list[dict], traces: list[dict], sampler: TreeCPU) -> dict:
    """Each record paired with its trace (by id, else in first-token order), its errors."""
    by_id = {t["id"]: t for t in traces}
    if records and all(r.get("id") in by_id for r in records):
        pairs = [(r, by_id[r["id"]]) for r in records]
    else:  # no ids: the k-th first token received ↔ the k-th written, within the window
        mine = sorted(records, key=lambda r: _first(r))
        pairs = list(zip(mine, traces[-len(mine) :], strict=False)) if mine else []
    ttft, itl, gaps = [], [], []
    for r, t in pairs:
        written = [c[0] for c in t["chunks"]]
        ttft.append((_first(r) - written[0]) * 1000)
        last = r["chunks"][-1] if r.get("chunks") else r.get("last")
        if last is not None and len(written) > 1:
            theirs = (last - _first(r)) / (len(written) - 1)
            itl.append(abs(theirs - (written[-1] - written[0]) / (len(written) - 1)) * 1000)
        if r.get("chunks") and len(r["chunks"]) == len(written):
            got = itertools.pairwise(r["chunks"])
            gaps.extend(abs((b - a) - (d - c)) * 1000
                        for (a, b), (c, d) in zip(got, itertools.pairwise(written), strict=True))  # fmt: skip
    window = (traces[0]["started_at"], traces[-1]["last_token_at"]) if traces else (0, 0)
    cpu = sampler.between(*window)
    return {
        "requests": len(records), "matched": len(pairs),
        "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99),
        "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99),
        "gap_p99": pct(gaps, 99) if gaps else float("nan"),
        "cpu_ms": 1000 * cpu / max(len(pairs), 1),
        "ttft_errors": ttft,  # per request, for the percentiles pooled over the repeats
    }  # fmt: skip


def _first(r: dict) -> float:
    return r["chunks"][0] if r.get("chunks") else r["first"]


# --- the harness worker (a process of its own, like the peers) --------------------------------


def harness_worker(url: str, level: str, out: str) -> None:
    from apps.benchmarks.harness.arrivals import Arrivals
    from apps.benchmarks.harness.client import Client
    from apps.benchmarks.harness.levels import run_level
    from apps.benchmarks.harness.types import LevelSpec, Scenario

    streams, rate, n = level_args(level)
    arrivals = None if streams else Arrivals(rate=rate, kind="poisson", seed=1)
    spec = LevelSpec(Scenario("peers", PROMPT, OUTPUT), streams or 4, n, 0, arrivals=arrivals)
    spec.warmup = 0  # as the peers here: no warm-up requests

    async def go():
        async with await Client.create(url, max_connections=max(64, (streams or 0) * 2,
                                                                 1024 if rate else 0)) as c:  # fmt: skip
            return await run_level(c, spec)

    try:
        import uvloop

        result = uvloop.run(go())
    except ImportError:
        result = asyncio.run(go())
    Path(out).write_text(json.dumps([
        {"id": r.response_id, "chunks": r.chunk_times} for r in result.details if r.ok
    ]))  # fmt: skip


# --- the run ----------------------------------------------------------------------------------


def _med(values: list[float]) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness-worker", nargs=3, metavar=("URL", "LEVEL", "OUT"))
    parser.add_argument("--levels", default="1,8,64,r20")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-peers.json"))
    args = parser.parse_args()
    if args.harness_worker:
        harness_worker(*args.harness_worker)
        return 0
    tools, levels = args.tools.split(","), args.levels.split(",")
    if pin(0):  # this process (its CPU sampler) shares sparksim's core, not the clients'
        os.sched_setaffinity(0, {0})
    missing = [t for t, p in (("vllm", VLLM), ("guidellm", GUIDELLM), ("aiperf", AIPERF))
               if t in tools and not p.exists()]  # fmt: skip
    if missing:
        print(f"!! missing {', '.join(missing)}: tools/vllm_env.sh cuda; tools/peers_env.sh all")
        return 1
    tok = tokenizer()
    port = free_port()
    argv = [*pin(0), sys.executable, "-m", "sparksim", "serve", MODEL, "--host", "127.0.0.1",
            "--port", str(port), "--gpu-memory-utilization", "0.85", "--max-model-len", "8192",
            "--max-num-seqs", "64", "--time-scale", str(args.time_scale),
            "--load-time-scale", "100000", "--jit-seconds", "0", "--log-level", "WARNING"]  # fmt: skip
    proc, url = start_sparksim(argv, port, ROOT / "var" / "bench-peers-sparksim.log", True)
    results: dict = {}
    try:
        for repeat in range(args.repeats):
            for level in levels:
                for tool in tools:
                    got = run_client(tool, url, level, tok, cpu=1 if pin(1) else None)
                    results.setdefault(level, {}).setdefault(tool, []).append(got)
                    print(f"  repeat {repeat + 1} {level:>4} {tool:>8}: TTFT err p50/p99 "
                          f"{got['ttft_p50']:.2f}/{got['ttft_p99']:.2f} ms, "
                          f"{got['matched']}/{got['requests']} matched", flush=True)  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    report(results, args)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"raw results: {args.json}")
    return 0


def report(results: dict, args) -> None:
    print(f"\nclients against sparksim's trace: {MODEL} profile at time scale "
          f"{args.time_scale:g}, {PROMPT}-token prompts, {OUTPUT} output tokens, sparksim on "
          f"CPU 0 and each client on CPU 1; wall ms, median (min–max) of {args.repeats} repeats; "
          "pooled: the percentile of |error| over every repeat's requests at once")  # fmt: skip
    head = ("level", "client", "TTFT err p50", "TTFT err p99", "pooled |err| p50 / p99",
            "ITL err p50", "ITL err p99", "gap err p99", "CPU ms/request")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for level, by_tool in results.items():
        pooled = {tool: pooled_ttft(runs) for tool, runs in by_tool.items()}
        for tool, runs in by_tool.items():
            cells = [_med([r[k] for r in runs]) for k in ("ttft_p50", "ttft_p99")]
            cells.append("{:.2f} / {:.2f}".format(*pooled[tool]))
            cells += [_med([r[k] for r in runs]) for k in
                      ("itl_p50", "itl_p99", "gap_p99", "cpu_ms")]  # fmt: skip
            print(f"| {level} | {tool} | " + " | ".join(cells) + " |")
        if "harness" in by_tool:
            verdict = "met" if goal_met(pooled) else "NOT met"
            print(f"| {level} | goal | harness TTFT err p50 and p99 (pooled) below every "
                  f"peer's: {verdict} ||||||| ")  # fmt: skip


def pooled_ttft(runs: list[dict]) -> tuple[float, float]:
    """The TTFT error's size (early or late alike), p50 and p99, over the requests of every
    repeat at once."""
    errors = [abs(e) for r in runs for e in r.get("ttft_errors", [])]
    return pct(errors, 50), pct(errors, 99)


def goal_met(pooled: dict[str, tuple[float, float]]) -> bool:
    """The issue's goal: the harness's TTFT error p50 and p99 below every peer's."""
    ours = pooled["harness"]
    return all(ours[i] < theirs[i] for tool, theirs in pooled.items() if tool != "harness"
               for i in (0, 1))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
