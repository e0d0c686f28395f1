"""Seed 000's single-stream table against sparksim's Nemotron-3-Super profile.

Real time (time scale 1), one warm server, a streaming httpx client timestamping every
SSE chunk; TTFT, prefill and decode rates as SPEC §5 defines them. Each scenario runs
REPEATS times with a fresh prompt (no prefix-cache hits); medians, spread and the ratio to
the seed are printed. The 1,834/32 total is compared with SPEC's corrected ~2.4 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench.sparksim_capacity import ROOT, start_sim

SEED = [
    ((58, 2), 0.42, 0.53, 140, 23.0),
    ((1834, 32), 1.12, 2.4, 1636, 23.7),
    ((7234, 32), 3.85, 5.26, 1877, 22.7),
    ((1834, 108), 1.12, 5.74, 1639, 23.4),
    ((7234, 124), 3.84, 9.26, 1884, 22.9),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import httpx

    from sparksim.probe import measure

    proc, url = start_sim(4, 1.0, max_model_len=131072)
    print("Seed 000 vs sparksim (Nemotron-3-Super profile, time scale 1, "
          f"median of {args.repeats}, spread in brackets)")  # fmt: skip
    print(
        "| prompt/gen | TTFT seed → sim | total seed → sim | prefill tok/s seed → sim | decode tok/s seed → sim |"
    )
    print("|---|---|---|---|---|")
    try:
        with httpx.Client(base_url=url, timeout=120) as client:
            for i, ((p, g), ttft, total, prefill, decode) in enumerate(SEED):
                runs = [
                    measure(client, p, g, scale=1, seed=1000 * i + r) for r in range(args.repeats)
                ]

                def cell(key: str, seed_value: float, fmt: str, runs=runs) -> str:
                    values = [run[key] for run in runs]
                    med = statistics.median(values)
                    return (f"{fmt.format(seed_value)} → {fmt.format(med)} "
                            f"({fmt.format(min(values))}–{fmt.format(max(values))}; ×{med / seed_value:.2f})")  # fmt: skip

                print(f"| {p:,}/{g} | {cell('ttft', ttft, '{:.2f}')} | {cell('total', total, '{:.2f}')} | "
                      f"{cell('prefill', prefill, '{:.0f}')} | {cell('decode', decode, '{:.1f}')} |")  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
