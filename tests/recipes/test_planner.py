"""The planner against hand-computed values (SPEC §2 and §4). No Django needed."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkdomain.planner import (
    Architecture,
    Flags,
    HostSpec,
    Verdict,
    kv_bytes_per_sequence,
    kv_bytes_per_token_split,
    largest_safe_utilization,
    plan,
    roofline_check,
    weight_bytes,
)
from sparkdomain.spark import GB, GIB, MIB

LLAMA_70B = Architecture(
    total_params_b=70.6, weight_format="nvfp4", num_layers=80, kv_heads=8, head_dim=128
)
NEMOTRON_SUPER = Architecture(
    total_params_b=120.6,
    active_params_b=12.0,
    weight_format="nvfp4",
    num_layers=88,
    attention_layers=8,
    kv_heads=2,
    head_dim=128,
    recurrent_state_mib=162.0,
    checkpoint_kv_dtype="fp8",
)


def test_70b_kv_per_token_in_fp16_follows_the_formula_not_the_seed_table():
    # 2 × 80 layers × 8 KV heads × 128 head dim × 2 bytes
    full, sliding = kv_bytes_per_token_split(LLAMA_70B, 2)
    assert full == 327_680 and sliding == 0
    # 4K tokens: 1.34 GB (the seed's table says ~5.2 GB; SPEC says the formula wins)
    assert kv_bytes_per_sequence(LLAMA_70B, 2, 4096) == 1_342_177_280
    assert round(kv_bytes_per_sequence(LLAMA_70B, 2, 32768) / GB, 1) == 10.7


def test_fp8_kv_halves_the_cache():
    auto = plan(LLAMA_70B, Flags(0.85, 4096, kv_cache_dtype="auto"))
    fp8 = plan(LLAMA_70B, Flags(0.85, 4096, kv_cache_dtype="fp8"))
    assert auto.kv_bytes_per_token == 327_680
    assert fp8.kv_bytes_per_token == 163_840
    assert fp8.kv_bytes_per_sequence * 2 == auto.kv_bytes_per_sequence


def test_hybrid_model_keeps_kv_only_in_its_attention_layers():
    # Nemotron-3-Super: 8 attention layers of 88, 2 KV heads × 128: 8 KiB/token in bf16
    bf16 = Architecture(num_layers=88, attention_layers=8, kv_heads=2, head_dim=128)
    assert kv_bytes_per_token_split(bf16, 2) == (8192.0, 0.0)
    # ...against ~320 KiB for a dense 70B
    assert kv_bytes_per_token_split(LLAMA_70B, 2)[0] / 1024 == 320


def test_mla_model_caches_one_latent_per_token_per_layer():
    deepseek = Architecture(
        num_layers=61, kv_lora_rank=512, qk_rope_head_dim=64, kv_heads=128, head_dim=192
    )
    # (512 + 64) × 61 layers × 2 bytes, no factor 2 for K and V
    assert kv_bytes_per_token_split(deepseek, 2) == (70_272.0, 0.0)


def test_sliding_window_layers_stop_growing_at_the_window():
    gpt_oss = Architecture(num_layers=36, attention_layers=36, sliding_window_layers=18,
                           sliding_window=128, kv_heads=8, head_dim=64)  # fmt: skip
    per_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(gpt_oss, 2, 100) == 36 * per_layer * 100
    assert kv_bytes_per_sequence(gpt_oss, 2, 8192) == 18 * per_layer * 8192 + 18 * per_layer * 128


def test_nvfp4_weights_are_4_5_bits_per_parameter():
    assert weight_bytes(Architecture(total_params_b=1.0, weight_format="nvfp4")) == 0.5625e9
    assert round(weight_bytes(LLAMA_70B) / GB, 2) == 39.71
    # A given checkpoint size wins over params × bytes (mixed-precision builds).
    assert weight_bytes(Architecture(total_params_b=120, weight_gb=75.5)) == 75.5 * GB


def test_nemotron_super_decode_ceiling_is_about_40_tokens_per_second():
    result = plan(NEMOTRON_SUPER, Flags(0.85, 131072, max_num_seqs=4, kv_cache_dtype="fp8"))
    # 12B active × 0.5625 B = 6.75 GB per token; 273 GB/s / 6.75 GB = 40.4 tok/s
    assert result.active_weight_bytes == 6.75e9
    assert round(result.decode_ceiling_tps, 1) == 40.4
    # The measured 23 tok/s (seed 000) is ~57 % of it.
    check = roofline_check(23.0, result.decode_ceiling_tps)
    assert round(check.percent) == 57 and check.plausible


def test_seed_004s_70b_dense_figure_is_flagged_as_physically_implausible():
    result = plan(LLAMA_70B, Flags(0.85, 4096, max_num_seqs=5, kv_cache_dtype="fp8"))
    assert round(result.decode_ceiling_tps, 1) == 6.9  # 273 / 39.7
    check = roofline_check(17.5, result.decode_ceiling_tps)
    assert not check.plausible
    assert "implausible" in check.message


def test_pool_headroom_and_kv_available_for_the_70b_preset():
    result = plan(LLAMA_70B, Flags(0.85, 4096, max_num_seqs=10, kv_cache_dtype="fp8"))
    pool = 0.85 * 121.7 * GIB
    assert result.pool_bytes == pytest.approx(pool)
    assert result.headroom_bytes == pytest.approx(128 * GB - 6 * GB - pool)
    assert result.kv_available_bytes == pytest.approx(pool - 3 * GB - 5 * GB - 70.6e9 * 0.5625)
    assert result.kv_needed_bytes == 10 * 163_840 * 4096
    assert result.verdict is Verdict.FITS
    assert result.max_concurrency == int(result.kv_available_bytes // (163_840 * 4096))
    assert result.tokens_that_fit == int(result.kv_available_bytes // 163_840)


def test_verdict_is_tight_between_70_and_100_percent_and_does_not_fit_above():
    arch = Architecture(total_params_b=30, num_layers=64, kv_heads=8, head_dim=128)
    flags = {"gpu_memory_utilization": 0.90, "kv_cache_dtype": "fp16"}
    available = plan(arch, Flags(max_model_len=1000, **flags)).kv_available_bytes
    per_seq_1k = 2 * 64 * 8 * 128 * 2 * 1000
    fit_seqs = int(available // per_seq_1k)
    assert (
        plan(arch, Flags(max_model_len=1000, max_num_seqs=int(fit_seqs * 0.5), **flags)).verdict
        == Verdict.FITS
    )
    assert (
        plan(arch, Flags(max_model_len=1000, max_num_seqs=int(fit_seqs * 0.8), **flags)).verdict
        == Verdict.TIGHT
    )
    assert (
        plan(arch, Flags(max_model_len=1000, max_num_seqs=fit_seqs + 1, **flags)).verdict
        == Verdict.DOES_NOT_FIT
    )


def test_enforce_eager_drops_the_cuda_graph_reserve():
    graphs = plan(LLAMA_70B, Flags(0.85, 4096))
    eager = plan(LLAMA_70B, Flags(0.85, 4096, enforce_eager=True))
    assert graphs.cuda_graphs_bytes == 5 * GB and eager.cuda_graphs_bytes == 0
    assert eager.kv_available_bytes - graphs.kv_available_bytes == pytest.approx(5 * GB)


def test_largest_safe_utilization_is_0_90_on_a_stock_spark_and_lower_with_a_bigger_reserve():
    assert largest_safe_utilization(HostSpec()) == Decimal("0.90")
    # The warn line (4 GB) stays free: 128 - 20 - 4 = 104 GB usable of 130.7 GB -> 0.79
    assert largest_safe_utilization(HostSpec(os_reserve_gb=20)) == Decimal("0.79")


def test_vllms_default_0_92_would_leave_less_than_the_freeze_margin():
    host = HostSpec()
    headroom = host.physical_memory_gb * GB - host.os_reserve_gb * GB - 0.92 * 121.7 * GIB
    assert headroom < host.freeze_margin_gb * GB
    with pytest.raises(ValueError, match=r"at most 0\.90"):
        plan(LLAMA_70B, Flags(0.92, 4096))


def test_a_host_with_a_big_co_tenant_turns_a_safe_value_into_a_freeze_risk():
    result = plan(LLAMA_70B, Flags(0.90, 4096), HostSpec(os_reserve_gb=12))
    assert result.verdict is Verdict.DOES_NOT_FIT
    assert result.warnings[0].code == "freeze-risk"


def test_warnings_name_the_unsafe_flags():
    result = plan(
        Architecture(
            total_params_b=70.6, num_layers=80, kv_heads=8, head_dim=128, weight_format="nvfp4"
        ),
        Flags(0.90, 65536, max_num_seqs=1, max_num_batched_tokens=65536),
    )
    codes = {w.code for w in result.warnings}
    assert {
        "above-recommended",
        "fp16-kv-long-context",
        "huge-batched-tokens",
    } <= codes
    above = next(w for w in result.warnings if w.code == "above-recommended")
    assert "0.80" in above.message and "long context" in above.message


def test_a_sequence_bigger_than_the_kv_pool_is_a_danger():
    result = plan(LLAMA_70B, Flags(0.50, 262144, kv_cache_dtype="auto"))
    assert result.verdict is Verdict.DOES_NOT_FIT
    assert "sequence-exceeds-kv" in {w.code for w in result.warnings}


def test_weights_bigger_than_the_pool_say_so():
    result = plan(Architecture(total_params_b=120, weight_format="bf16", num_layers=1,
                               kv_heads=1, head_dim=1), Flags(0.9, 1024))  # fmt: skip
    assert result.verdict is Verdict.DOES_NOT_FIT
    assert result.warnings[0].code == "weights-exceed-pool"


def test_unknown_architecture_is_reported_not_invented():
    result = plan(Architecture(), Flags(0.85, 8192))
    assert result.verdict is Verdict.UNKNOWN
    assert result.weights_bytes is None and result.kv_bytes_per_token is None
    assert result.decode_ceiling_tps is None
    assert len(result.unknowns) == 3
    assert any("total parameters" in u for u in result.unknowns)


def test_recurrent_state_counts_per_running_sequence():
    result = plan(NEMOTRON_SUPER, Flags(0.85, 131072, max_num_seqs=4, kv_cache_dtype="fp8"))
    per_seq = 2 * 8 * 2 * 128 * 1 * 131072  # fp8 KV in 8 attention layers
    assert result.kv_bytes_per_sequence == per_seq
    assert result.kv_needed_bytes == 4 * (per_seq + 162 * MIB)


def test_min_utilization_to_fit_is_what_the_recipe_needs():
    result = plan(LLAMA_70B, Flags(0.85, 4096, max_num_seqs=5, kv_cache_dtype="fp8"))
    assert result.min_utilization_to_fit is not None
    again = plan(LLAMA_70B, Flags(float(result.min_utilization_to_fit), 4096, max_num_seqs=5,
                                  kv_cache_dtype="fp8"))  # fmt: skip
    assert again.verdict in (Verdict.TIGHT, Verdict.FITS)


def test_budget_segments_add_up_to_physical_memory():
    result = plan(LLAMA_70B, Flags(0.85, 4096, max_num_seqs=5, kv_cache_dtype="fp8"))
    assert sum(s.bytes for s in result.budget()) == pytest.approx(128 * GB)


# --- properties ------------------------------------------------------------------------------

archs = st.builds(
    Architecture,
    total_params_b=st.one_of(st.none(), st.floats(0.1, 1000)),
    active_params_b=st.one_of(st.none(), st.floats(0.1, 100)),
    weight_format=st.sampled_from(
        ["bf16", "fp16", "fp8", "int8", "nvfp4", "mxfp4", "int4", "fp32"]
    ),
    weight_gb=st.one_of(st.none(), st.floats(0.1, 500)),
    num_layers=st.one_of(st.none(), st.integers(1, 200)),
    attention_layers=st.one_of(st.none(), st.integers(0, 200)),
    kv_heads=st.one_of(st.none(), st.integers(1, 128)),
    head_dim=st.one_of(st.none(), st.integers(1, 512)),
    kv_lora_rank=st.one_of(st.none(), st.integers(1, 1024)),
    qk_rope_head_dim=st.one_of(st.none(), st.integers(0, 256)),
    sliding_window_layers=st.one_of(st.none(), st.integers(0, 200)),
    sliding_window=st.one_of(st.none(), st.integers(1, 1_000_000)),
    recurrent_state_mib=st.one_of(st.none(), st.floats(0, 10_000)),
    checkpoint_kv_dtype=st.sampled_from(["", "bf16", "fp16", "fp8"]),
)
flag_sets = st.builds(
    Flags,
    gpu_memory_utilization=st.sampled_from([x / 100 for x in range(1, 91)]),
    max_model_len=st.integers(1, 10_000_000),
    max_num_seqs=st.integers(1, 1024),
    kv_cache_dtype=st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]),
    enforce_eager=st.booleans(),
    max_num_batched_tokens=st.one_of(st.none(), st.integers(1, 1_000_000)),
    tensor_parallel_size=st.integers(1, 8),
)


@settings(max_examples=300, deadline=None)
@given(archs, flag_sets)
def test_no_accepted_input_crashes_the_planner(arch, flags):
    result = plan(arch, flags)
    assert result.verdict in Verdict
    assert sum(s.bytes for s in result.budget()) >= 0


@settings(max_examples=200, deadline=None)
@given(archs, flag_sets, st.integers(1, 1_000_000))
def test_more_context_never_needs_less_memory(arch, flags, extra):
    short = plan(arch, flags)
    longer = plan(arch, Flags(**{**flags.__dict__, "max_model_len": flags.max_model_len + extra}))
    if short.kv_needed_bytes is None:
        assert longer.kv_needed_bytes is None
        return
    assert longer.kv_needed_bytes >= short.kv_needed_bytes
    order = [Verdict.FITS, Verdict.TIGHT, Verdict.DOES_NOT_FIT]
    if short.verdict in order and longer.verdict in order:
        assert order.index(longer.verdict) >= order.index(short.verdict)
