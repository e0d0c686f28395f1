"""How many concurrent streams sparksim sustains on one core with accurate timing.

sparksim is pinned to CPU 0 and this load generator to CPU 1 (taskset, when available).
For each concurrency level the generator keeps N streams open (closed loop) for a fixed
window and reads:
- the engine's own lateness: actual − scheduled end of every step (/sparksim/stats),
- the client-side decode rate compared with the rate the timing model schedules
  (a ratio of 1.00 means what the client sees is what the model intends),
- tokens per second delivered.
Each level runs REPEATS times; medians and the spread (min–max) are printed.

Run with `make bench` (or `python -m bench.sparksim_capacity`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench._stack import ROOT, free_port, pin, start_sparksim

MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"


def start_sim(
    max_seqs: int, time_scale: float, max_model_len: int = 4096
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [*pin(0), sys.executable, "-m", "sparksim", "serve", MODEL, "--port", str(port),
            "--gpu-memory-utilization", "0.85", "--max-model-len", str(max_model_len),
            "--max-num-seqs", str(max_seqs), "--time-scale", str(time_scale),
            "--load-time-scale", "100000", "--jit-seconds", "0", "--log-level", "WARNING"]  # fmt: skip
    return start_sparksim(argv, port, ROOT / "var" / f"bench-sparksim-{max_seqs}.log")


async def stream_forever(
    client: httpx.AsyncClient, stop: float, rates: list[float], counts: list[int], seed: int
):
    while time.monotonic() < stop:
        body = {"prompt": list(range(300 + seed % 500, 428 + seed % 500)), "max_tokens": 200,
                "ignore_eos": True, "stream": True, "cache_salt": str(seed)}  # fmt: skip
        seed += 7919
        stamps = []
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"text": ""' not in line:
                    stamps.append(time.monotonic())
        counts.append(len(stamps))
        if len(stamps) > 20:
            rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))


async def one_level(url: str, streams: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await client.get("/sparksim/stats?reset=1")
        rates: list[float] = []
        counts: list[int] = []
        t0 = time.monotonic()
        await asyncio.gather(
            *(stream_forever(client, t0 + seconds, rates, counts, i) for i in range(streams))
        )
        wall = time.monotonic() - t0
        stats = (await client.get("/sparksim/stats")).json()
    return {
        "tokens_per_s": sum(counts) / wall,
        "client_rate": statistics.median(rates) if rates else 0.0,
        **stats,
    }


def expected_rate(streams: int, time_scale: float) -> float:
    """Tokens/s per stream the timing model schedules for `streams` decoding together (each
    stream at the middle of its 128-token prompt + 200-token answer)."""
    from sparkdomain.planner import kv_element_bytes
    from sparksim.engine import decode_step_seconds
    from sparksim.profiles import NEMOTRON_SUPER as profile

    arch = profile.architecture
    step = decode_step_seconds(profile, arch, kv_element_bytes(arch, "auto"), [228] * streams)
    return time_scale / step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,8,32,64,96,128,192")
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(ROOT / "var" / "bench-sparksim.json"))
    args = parser.parse_args()
    if pin(1):
        os.sched_setaffinity(0, {1})
    levels = [int(x) for x in args.levels.split(",")]
    print(f"sparksim capacity: Nemotron-3-Super profile, time scale {args.time_scale:g}, "
          f"{args.seconds:g} s per level, {args.repeats} repeats; sparksim on CPU 0, client on CPU 1")  # fmt: skip
    print(
        f"{'streams':>7} {'tok/s':>16} {'late p99 ms':>18} {'late max ms':>12} {'client/model rate':>22}"
    )
    results = []
    for streams in levels:
        try:
            proc, url = start_sim(streams, args.time_scale)
        except RuntimeError as exc:
            print(f"{streams:>7} could not start: {str(exc).splitlines()[-1]}")
            continue
        try:
            runs = [asyncio.run(one_level(url, streams, args.seconds)) for _ in range(args.repeats)]
        except httpx.HTTPError as exc:
            print(f"{streams:>7} failed: {type(exc).__name__} {exc}")
            continue
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        want = expected_rate(streams, args.time_scale)
        tps = [r["tokens_per_s"] for r in runs]
        p99 = [r.get("late_p99_ms", 0.0) for r in runs]
        ratio = [r["client_rate"] / want for r in runs]
        row = {"streams": streams, "tokens_per_s": tps, "late_p99_ms": p99,
               "late_max_ms": [r.get("late_max_ms", 0.0) for r in runs], "client_over_model": ratio}  # fmt: skip
        results.append(row)
        print(f"{streams:>7} {_med(tps, '{:.0f}'):>16} {_med(p99, '{:.2f}'):>18} "
              f"{statistics.median(row['late_max_ms']):>12.1f} {_med(ratio, '{:.3f}'):>22}")  # fmt: skip
    ok = [r for r in results if statistics.median(r["late_p99_ms"]) < 2.0]
    if ok:
        best = max(ok, key=lambda r: r["streams"])
        print(f"\nLargest level with engine lateness p99 < 2 ms: {best['streams']} streams, "
              f"{statistics.median(best['tokens_per_s']):.0f} tok/s delivered (median).")  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"raw results: {args.json}")
    return 0


def _med(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


if __name__ == "__main__":
    sys.exit(main())
