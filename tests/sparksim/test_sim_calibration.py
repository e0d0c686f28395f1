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


def assert_within(
    measured: dict, expected: dict, keys=("ttft", "prefill", "decode"), tolerance=0.10
):
    for key in keys:
        assert abs(measured[key] / expected[key] - 1) <= tolerance, (
            key,
            measured[key],
            expected[key],
        )


def within_once(take, expected: dict, keys=("ttft", "prefill", "decode"), tries=3) -> None:
    """`take(seed_offset)` measures once. A busy machine that holds sparksim or this client
    off the CPU for tens of ms skews one measurement past the 10 %; a miscalibrated profile
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


def test_scaling_does_not_change_the_ratios(realtime, scaled):
    # The client's own fixed wall-clock cost (sending, tokenizing: a few ms) is multiplied
    # by the scale too, which adds 2–5 % to a 1.1 s TTFT at 10×: allow 8 %. A busy machine
    # can skew one pair of measurements past it (see within_once): up to three pairs.
    for attempt in range(3):
        with realtime.client() as a, scaled.client() as b:
            slow = measure(a, 1834, 32, scale=1, seed=11 + 1000 * attempt)
            fast = measure(b, 1834, 32, scale=10, seed=11 + 1000 * attempt)
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
