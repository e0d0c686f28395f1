"""Open-loop arrivals (apps.benchmarks.harness.arrivals): the schedules' statistics with a
fixed seed, the ramp-up, the saturation rule, and open-loop levels against real sparksim
processes (a rate it serves, and one far above its capacity)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from apps.benchmarks.harness.arrivals import Arrivals, Saturation, offsets
from tests.benchmarks.test_harness import level, spec
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch


def _gaps(arrivals: Arrivals, n: int) -> list[float]:
    times = offsets(arrivals, n)
    return [b - a for a, b in itertools.pairwise(times)]


def test_poisson_arrivals_have_the_rate_and_the_dispersion_of_a_poisson_process():
    rate, n = 4.0, 20_000
    times = offsets(Arrivals(rate=rate, kind="poisson", seed=7), n)
    assert times[0] == 0.0 and times == sorted(times)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the mean interval is 1/rate within four standard errors (the SE of a mean of
    # exponentials is mean/√n)
    assert abs(statistics.fmean(gaps) - 1 / rate) < 4 * (1 / rate) / math.sqrt(n)
    # exponential intervals: coefficient of variation 1
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, abs=0.03)
    # counts per second: a Poisson count has variance = mean (index of dispersion 1); the
    # dispersion test's statistic, (k−1)·var/mean over k windows, is χ² with k−1 degrees
    counts = [0] * int(times[-1])
    for t in times:
        if int(t) < len(counts):
            counts[int(t)] += 1
    k = len(counts)
    chi2 = (k - 1) * statistics.variance(counts) / statistics.fmean(counts)
    z = (chi2 - (k - 1)) / math.sqrt(2 * (k - 1))
    assert abs(z) < 3.3, (chi2, k)  # two-sided, p ≈ 0.001
    assert statistics.fmean(counts) == pytest.approx(rate, rel=0.03)


@pytest.mark.parametrize(("burstiness", "cv"), [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_gamma_burstiness_keeps_the_rate_and_sets_the_spread(burstiness, cv):
    gaps = _gaps(Arrivals(rate=10, kind="gamma", burstiness=burstiness, seed=3), 20_000)
    assert statistics.fmean(gaps) == pytest.approx(0.1, rel=0.04)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.06)


def test_constant_arrivals_are_evenly_spaced_and_a_seed_repeats_a_schedule():
    assert offsets(Arrivals(rate=4, kind="constant"), 4) == [0.0, 0.25, 0.5, 0.75]
    one = offsets(Arrivals(rate=3, seed=11), 50)
    assert one == offsets(Arrivals(rate=3, seed=11), 50)
    assert one != offsets(Arrivals(rate=3, seed=12), 50)


def test_a_ramp_up_starts_slow_and_reaches_the_rate():
    ramp, rate = 20.0, 10.0
    times = offsets(Arrivals(rate=rate, kind="constant", ramp_up_s=ramp), 2000)
    during = sum(t < ramp for t in times)
    assert during == pytest.approx(rate * ramp / 2, abs=2)  # ∫ linear ramp = half the rate
    first_half = sum(t < ramp / 2 for t in times)
    assert first_half == pytest.approx(rate * ramp / 8, abs=2)  # a quarter of the ramp's
    after = [b - a for a, b in itertools.pairwise(times) if a >= ramp]
    assert after and all(g == pytest.approx(1 / rate) for g in after)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rate": 0}, "above 0"),
        ({"rate": 1e9}, "at most"),
        ({"kind": "bursty"}, "arrivals are constant, poisson, gamma"),
        ({"burstiness": 0}, "burstiness"),
        ({"ramp_up_s": -1}, "ramp-up"),
        ({"max_concurrency": 0}, "cap"),
    ],
)
def test_impossible_arrivals_are_refused_with_the_reason(change, message):
    with pytest.raises(ValueError, match=message):
        Arrivals(**{"rate": 1.0, **change})


def test_the_saturation_rule_trips_on_a_growing_backlog_only():
    steady = Saturation()
    for i in range(500):  # a stationary backlog around 20, noisy
        assert not steady.observe(20 + (i * 7919) % 9 - 4)
    growing = Saturation()
    tripped_at = next(i for i in range(500) if growing.observe(i // 2))  # half pile up
    assert tripped_at < 80 and "not keeping up" in growing.reason
    small = Saturation()
    assert not any(small.observe(min(i, 10)) for i in range(200))  # under the floor


# The backlog at each arrival of a Poisson level at 20 req/s that sparksim kept up with
# (answers in 0.17 s on average, 0.37 s at most): a burst climbs to 16, then the server
# answers a batch at once. The slope rule alone stopped this level as saturated.
KEPT_UP = [
    1, 2, 3, 2, 3, 3, 4, 5, 2, 3, 4, 4, 5, 3, 4, 5, 4, 5, 1, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7,
    8, 9, 10, 11, 12, 13, 14, 14, 13, 10, 11, 1, 1, 2, 3, 4, 2, 1, 2, 2, 2, 3, 3, 1, 1, 2, 3,
    4, 5, 5, 5, 6, 7, 5, 3, 3, 4, 4, 3, 3, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 1, 2, 2, 1, 2, 3, 1,
    2, 3, 4, 4, 1, 2, 3, 2, 1, 2, 1, 2, 3, 4, 5, 3, 2, 3, 4, 5, 6, 7, 7, 6, 5, 4, 5, 6, 7, 7,
    6, 2, 2, 1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13, 14, 15, 15, 13, 14, 15, 16,
    17, 18, 12, 4, 2, 1,
]  # fmt: skip


def test_a_burst_the_server_drains_is_not_saturation():
    watch = Saturation()
    assert not any(watch.observe(b) for b in KEPT_UP)
    assert max(watch.backlog) >= 16  # above the floor, and climbing fast: but drained
    # the same climb that never drains again (the server stopped keeping up) trips
    stuck = Saturation()
    assert any(stuck.observe(b) for b in [*KEPT_UP[:-4], *range(19, 60)])
    assert "not keeping up" in stuck.reason


# --- against sparksim -----------------------------------------------------------------------

FAST = 10


@pytest.fixture(scope="module")
def small_sim(tmp_path_factory):
    """Nemotron at 10× speed with room for two sequences: saturates at a few requests/s."""
    flags = list(NEMOTRON_FLAGS)
    flags[flags.index("--max-num-seqs") + 1] = "2"
    sim = launch(tmp_path_factory.mktemp("small"), *flags, time_scale=FAST)
    yield sim
    sim.stop()


def test_an_open_loop_level_sends_at_the_requested_rate(small_sim):
    arrivals = Arrivals(rate=0.5, kind="poisson", seed=5)  # simulated req/s: 5 wall req/s
    result = level(small_sim, spec(58, 2, requests=20, warmup=1, arrivals=arrivals), FAST)
    assert result.error is None and result.ok == 20 and not result.saturated
    info = result.arrival
    assert info["requested_rate"] == 0.5 and info["arrived"] == info["planned"] == 20
    # The sends follow the schedule: the achieved rate is the schedule's own rate (a busy
    # machine delays single sends; with absolute due times it cannot drift the rest).
    due = offsets(arrivals, 20)
    scheduled = (len(due) - 1) / due[-1]
    assert info["achieved_rate"] == pytest.approx(scheduled, rel=0.25)
    assert info["lag_p50_ms"] is not None and info["lag_p50_ms"] >= 0
    # What the server did meanwhile, from its /metrics sampled during the level
    server = result.server
    assert server["samples"] >= 3 and server["sample_failures"] == 0
    assert 0 < server["kv_usage_peak"] <= 1 and server["kv_usage_mean"] <= server["kv_usage_peak"]
    assert server["running_peak"] >= 1 and server["preemptions"] == 0


def test_a_rate_far_above_capacity_trips_the_saturation_stop(small_sim):
    # two sequences of 108 tokens at ~24 tok/s serve ≈ 0.4 req/s; ask for 20
    arrivals = Arrivals(rate=20, kind="constant")
    result = level(small_sim, spec(58, 108, requests=300, warmup=1, arrivals=arrivals), FAST)
    assert result.saturated and result.arrival["saturated"]
    assert "not keeping up" in result.arrival["saturation"]
    assert result.arrival["arrived"] < 300 and result.sent == result.arrival["arrived"]
    assert result.arrival["peak_backlog"] >= 16
    # the server saw it too: requests waiting, and time spent queued
    assert result.server["waiting_peak"] >= 8
    assert result.server["mean_queue_s"] > 1.0


def test_a_warm_prefix_shows_as_prefix_cache_hits_on_the_server(small_sim):
    cold = level(small_sim, spec(1834, 2, requests=4, warmup=1), FAST)
    warm = level(small_sim, spec(1834, 2, requests=4, warmup=1, warm_prefix=True), FAST)
    assert warm.server["prefix_hit_rate"] > 0.8
    assert cold.server["prefix_hit_rate"] < 0.1


# --- the completions endpoint -----------------------------------------------------------------


@pytest.mark.parametrize("prompt", [58, 1834])
def test_a_completions_level_sends_text_prompts_of_exact_length(small_sim, prompt):
    result = level(small_sim, spec(prompt, 16, requests=2, warmup=1, endpoint="completions"),
                   FAST)  # fmt: skip
    assert result.error is None and result.ok == 2
    assert result.prompt_mismatches == 0 and result.output_mismatches == 0
    assert [r.prompt_tokens for r in result.details] == [prompt, prompt]
    assert result.server["prompt_tokens"] == 2 * prompt  # the server counted the same


def test_a_suite_sends_every_level_to_its_endpoint():
    from apps.benchmarks.models import Suite
    from apps.benchmarks.plans import plan_levels

    suite = Suite(name="x", scenarios=[{"name": "a", "prompt_tokens": 5, "output_tokens": 2}],
                  sweep_levels=[1, 2], endpoint="completions")  # fmt: skip
    assert {spec.endpoint for _kind, spec in plan_levels(suite.plan(), 4)} == {"completions"}
    plan = suite.plan()
    del plan["endpoint"]  # a job queued before the endpoint was a choice
    assert {spec.endpoint for _kind, spec in plan_levels(plan, 4)} == {"chat"}
    with pytest.raises(ValueError, match="chat or completions"):
        spec(5, 2, endpoint="responses")


# --- a shared-prefix workload -----------------------------------------------------------------


def test_shared_system_prompts_become_prefix_cache_hits_and_a_faster_first_token(small_sim):
    from apps.benchmarks.harness.types import SharedPrefix

    shared = SharedPrefix(groups=2, tokens=1500)
    cold = level(small_sim, spec(1834, 4, requests=8, warmup=2), FAST)
    warm = level(small_sim, spec(1834, 4, requests=8, warmup=2, shared_prefix=shared), FAST)
    for result in (cold, warm):
        assert result.ok == 8 and result.prompt_mismatches == 0
    assert {r.prompt_tokens for r in warm.details} == {1834}
    # ~1,500 of each 1,834-token prompt is one of two system prompts the warm-up cached
    assert warm.server["prefix_hit_rate"] > 0.6, warm.server
    assert cold.server["prefix_hit_rate"] < 0.1
    assert warm.ttft["p50"] < cold.ttft["p50"] * 0.85  # only ~330 tokens left to prefill


def test_a_shared_prefix_that_leaves_no_room_is_refused_before_anything_is_sent():
    from apps.benchmarks.harness.types import SharedPrefix, level_refusal

    refusal = level_refusal(spec(1834, 4, shared_prefix=SharedPrefix(groups=2, tokens=1800)))
    assert "a shared prefix of 1,800 tokens leaves no room in a 1,834-token prompt" in refusal
    with pytest.raises(ValueError, match="1 to 64 groups"):
        SharedPrefix(groups=0, tokens=100)


# --- varied lengths -------------------------------------------------------------------------


def test_length_distributions_keep_the_mean_and_their_bounds():
    from apps.benchmarks.harness.types import Lengths, request_lengths

    uniform = spec(1000, 200, requests=4000, lengths=Lengths("uniform", 0.5, seed=1))
    pairs = request_lengths(uniform, 4000)
    prompts, outputs = [p for p, _ in pairs], [o for _, o in pairs]
    assert min(prompts) >= 500 and max(prompts) <= 1500 and min(outputs) >= 100
    assert statistics.fmean(prompts) == pytest.approx(1000, rel=0.02)
    # a uniform spread of ±50 % has a standard deviation of 0.5 × 1000 / √3
    assert statistics.pstdev(prompts) == pytest.approx(500 / math.sqrt(3), rel=0.05)
    normal = spec(1000, 200, requests=4000, lengths=Lengths("normal", 0.2, seed=1))
    prompts = [p for p, _ in request_lengths(normal, 4000)]
    assert statistics.fmean(prompts) == pytest.approx(1000, rel=0.02)
    assert statistics.pstdev(prompts) == pytest.approx(200, rel=0.08)  # clipped at ±2 sd
    assert min(prompts) >= 600 and max(prompts) <= 1400
    assert request_lengths(normal, 50) == request_lengths(normal, 50)  # seeded
    with pytest.raises(ValueError, match="uniform or normal"):
        Lengths("zipf", 0.2)


def test_a_level_of_varied_lengths_sends_each_request_its_own_exact_lengths(small_sim):
    from apps.benchmarks.harness.types import Lengths

    result = level(small_sim, spec(400, 24, requests=6, warmup=1,
                                   lengths=Lengths("uniform", 0.5, seed=4)), FAST)  # fmt: skip
    assert result.ok == 6 and result.prompt_mismatches == 0 and result.output_mismatches == 0
    prompts = [r.prompt_tokens for r in result.details]
    assert prompts == [r.intended_prompt_tokens for r in result.details]
    assert len(set(prompts)) > 3 and all(200 <= p <= 600 for p in prompts)
    outputs = [r.output_tokens for r in result.details]
    assert outputs == [r.intended_output_tokens for r in result.details] and len(set(outputs)) > 2
