"""Plan against measured, the pure arithmetic (sparkdomain/calibration.py): hand-computed
values, and the numbers real vLLM 0.32.0 printed in a captured start-up log."""

from pathlib import Path

import pytest

from sparkdomain import calibration as calc
from sparkdomain.planner import Architecture, Flags, HostSpec, Verdict, plan
from vllm_adapter.logparse import LogFollower

GIB = 2**30
# A dense 8B bf16 model: 16 GB of weights, 2 (K,V) × 32 layers × 8 heads × 128 × 2 bytes
# = 131,072 bytes of KV per token, so one 8,192-token sequence is exactly 1 GiB.
ARCH = Architecture(total_params_b=8, weight_format="bf16", num_layers=32, kv_heads=8, head_dim=128)
FLAGS = Flags(gpu_memory_utilization=0.5, max_model_len=8192, max_num_seqs=4)
# By hand: pool 0.5 × 121.7 GiB; KV = pool − 3 GB context − 5 GB graphs − 16 GB weights.
POOL = 0.5 * 121.7 * GIB
KV_BYTES = POOL - 3e9 - 5e9 - 16e9  # 41,337,189,990.4
KV_GIB = KV_BYTES / GIB  # 38.4983 GiB
TOKENS = 315_377  # floor(41,337,189,990.4 / 131,072)
WEIGHTS_GIB = 16e9 / GIB  # 14.9012 GiB
REAL_LOG = Path(__file__).resolve().parents[1] / "vllm_adapter" / "data"


def test_the_prediction_is_in_vllms_units():
    want = calc.predicted(plan(ARCH, FLAGS))
    assert want["kv_cache_gib"] == pytest.approx(38.498258, abs=1e-6)
    assert want["kv_cache_gib"] == pytest.approx(KV_GIB)
    assert want["kv_cache_tokens"] == TOKENS
    # vLLM prints concurrency unfloored ("38.50x"); one sequence is 1 GiB, so it equals the
    # KV cache in GiB — not the plan's floored 38.
    assert want["max_concurrency"] == pytest.approx(KV_GIB)
    assert plan(ARCH, FLAGS).max_concurrency == 38
    assert want["model_memory_gib"] == pytest.approx(14.901161, abs=1e-6)


def test_a_check_is_measured_over_predicted_and_says_so_in_the_pages_units():
    facts = {"kv_cache_gib": 34.65, "kv_cache_tokens": 283_839, "max_concurrency": 34.65,
             "model_memory_gib": 15.2, "vllm_version": "0.33.0"}  # fmt: skip
    checks = {c.quantity: c for c in calc.compare(plan(ARCH, FLAGS), facts)}
    assert list(checks) == list(calc.QUANTITIES)
    assert checks["kv_cache_gib"].ratio == pytest.approx(34.65 / 38.498258, rel=1e-6)  # 0.9000
    assert checks["kv_cache_gib"].ratio_text == "0.90×"
    assert checks["kv_cache_tokens"].ratio == pytest.approx(283_839 / 315_377)
    assert checks["kv_cache_tokens"].measured_text == "283,839"
    assert checks["kv_cache_tokens"].predicted_text == "315,377"
    assert checks["model_memory_gib"].ratio == pytest.approx(15.2 / 14.901161)  # 1.0201
    assert checks["model_memory_gib"].predicted_text == "14.90 GiB"
    assert checks["max_concurrency"].measured_text == "34.65×"


def test_missing_or_odd_facts_measure_nothing():
    facts = {"kv_cache_gib": float("nan"), "kv_cache_tokens": True, "max_concurrency": "3x"}
    assert calc.measured(facts) == dict.fromkeys(calc.QUANTITIES)
    check = calc.Check("kv_cache_gib", predicted=0.0, measured=1.0)
    assert check.ratio is None and check.ratio_text == "—"  # no KV planned: no ratio


def test_a_correction_is_the_median_of_the_latest_starts():
    c = calc.correction("kv_cache_gib", [0.93, 0.91, 0.97])
    assert (c.ratio, c.low, c.high, c.starts) == (0.93, 0.91, 0.97, 3)
    # Only the latest WINDOW count (newest first): an image that changed is followed.
    latest = [0.5] * calc.WINDOW + [2.0] * 5
    assert calc.correction("kv_cache_gib", latest).ratio == 0.5
    assert calc.correction("kv_cache_gib", []) is None


def test_the_corrected_plan_scales_each_number_and_rejudges_the_fit():
    p = plan(ARCH, FLAGS)  # needs 4 × 1 GiB of 38.5 GiB: fits
    assert p.verdict is Verdict.FITS
    corrections = {
        "kv_cache_gib": calc.Correction("kv_cache_gib", 0.9, 0.88, 0.95, 3),
        "model_memory_gib": calc.Correction("model_memory_gib", 1.02, 1.02, 1.02, 3),
    }
    result = calc.corrected(p, corrections)
    assert result.corrected["kv_cache_gib"] == pytest.approx(KV_GIB * 0.9)  # 34.648
    # No tokens or concurrency ratio measured: the KV bytes' ratio corrects them.
    assert result.corrected["kv_cache_tokens"] == pytest.approx(TOKENS * 0.9)  # 283,839.3
    assert result.corrected["max_concurrency"] == pytest.approx(KV_GIB * 0.9)
    assert result.corrected["model_memory_gib"] == pytest.approx(WEIGHTS_GIB * 1.02)
    assert result.verdict is Verdict.FITS
    assert result.kv_usage_percent == pytest.approx(4 / (KV_GIB * 0.9) * 100)  # 11.5 %
    assert calc.describe(result, host="spark-1", image="vllm/vllm-openai:nightly") == (
        "On spark-1 with vllm/vllm-openai:nightly, vLLM measured 0.90× the planned KV cache "
        "over 3 starts (from 0.88× to 0.95×): corrected KV cache ≈ 34.6 GiB, tokens ≈ 283,839 "
        "(planned 38.5 GiB, 315,377)."
    )


def test_a_measured_shortfall_turns_fits_into_tight_or_does_not_fit():
    # 24 sequences × 1 GiB = 24 GiB of 38.5 GiB planned (62 %: fits).
    p = plan(ARCH, Flags(gpu_memory_utilization=0.5, max_model_len=8192, max_num_seqs=24))
    assert p.verdict is Verdict.FITS
    tight = calc.corrected(p, {"kv_cache_gib": calc.Correction("kv_cache_gib", 0.8, 0.8, 0.8, 1)})
    assert tight.verdict is Verdict.TIGHT  # 24 of 30.8 GiB = 78 %
    assert tight.kv_usage_percent == pytest.approx(24 / (KV_GIB * 0.8) * 100)
    short = calc.corrected(p, {"kv_cache_gib": calc.Correction("kv_cache_gib", 0.6, 0.6, 0.6, 1)})
    assert short.verdict is Verdict.DOES_NOT_FIT  # 24 of 23.1 GiB
    assert short.planned_verdict is Verdict.FITS
    text = calc.describe(short, host="spark-2", image="img:tag", scope="of this recipe")
    assert text.startswith("On spark-2 with img:tag, vLLM measured 0.60× the planned KV cache "
                           "over 1 start of this recipe: ")  # fmt: skip


def test_a_freeze_risk_stays_does_not_fit_whatever_kv_was_measured():
    host = HostSpec(physical_memory_gb=64)  # 0.5 × 121.7 GiB leaves under 3 GB: freeze risk
    p = plan(ARCH, FLAGS, host)
    assert p.verdict is Verdict.DOES_NOT_FIT
    result = calc.corrected(p, {"kv_cache_gib": calc.Correction("kv_cache_gib", 1.0, 1, 1, 1)})
    assert result.verdict is Verdict.DOES_NOT_FIT


def test_real_vllm_on_a_cpu_sizes_its_kv_cache_from_its_setting_not_the_utilization():
    """The numbers of a real vLLM 0.32.0 start (the captured log; VLLM_CPU_KVCACHE_SPACE=1)
    beside the plan for its tiny model: what a calibration on a real host records."""
    follower = LogFollower()
    for line in (REAL_LOG / "vllm-0.32.0-cpu-startup.log").read_text().splitlines():
        follower.feed(line)
    got = calc.measured(follower.facts)
    # 1 GiB ÷ (2 (K,V) × 2 layers × 2 KV heads × 64 × 2 bytes = 1,024 bytes a token).
    assert got["kv_cache_tokens"] == 1_048_576
    assert got["max_concurrency"] == 1024.0  # 1,048,576 ÷ 1,024 tokens per request
    tiny = Architecture(total_params_b=0.0009, weight_format="bf16", num_layers=2, kv_heads=2,
                        head_dim=64)  # fmt: skip
    p = plan(tiny, Flags(gpu_memory_utilization=0.5, max_model_len=1024, max_num_seqs=4))
    [tokens] = [c for c in calc.compare(p, follower.facts) if c.quantity == "kv_cache_tokens"]
    # The planner gives the tiny model the whole Spark pool: 0.5 × 121.7 GiB − 8 GB − 1.8 MB.
    planned_tokens = (0.5 * 121.7 * GIB - 8e9 - 0.0009e9 * 2) // 1024
    assert tokens.predicted == planned_tokens
    assert tokens.ratio == pytest.approx(1_048_576 / planned_tokens)  # ≈ 0.0197
    assert tokens.ratio < 0.05
