"""A pair of Sparks in the planner: half the weights and KV per side, each side's own spec,
the link's all-reduces in the decode ceiling (sparkdomain/pair.py, planner/link.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkdomain import pair
from sparkdomain.planner import Architecture, Flags, HostSpec, Verdict, plan
from sparkdomain.planner.link import (
    ALLREDUCE_LATENCY_S,
    DEFAULT_HIDDEN_SIZE,
    allreduce_seconds,
    step_comm_seconds,
)
from sparkdomain.presets import architecture_of
from sparkdomain.spark import GB


def _arch(key: str = "nemotron-3-super-120b-nvfp4") -> Architecture:
    fields = architecture_of(key)
    fields.pop("model_id")
    return Architecture(**fields)


def test_only_one_spark_or_a_pair_is_servable():
    assert pair.tensor_parallel_problem(1) is None
    assert pair.tensor_parallel_problem(2) is None
    message = pair.tensor_parallel_problem(4)
    assert "needs 4 GPUs" in message and "use 1 (one Spark) or 2 (a pair)" in message


def test_an_allreduce_is_a_latency_plus_the_bytes_on_the_link():
    # one decode token: 4096 × 2 bytes, each rank sends half of 2 × that = 8 KiB at 25 GB/s
    one = allreduce_seconds(1)
    assert one == pytest.approx(ALLREDUCE_LATENCY_S + 8192 / 25e9)
    # a 2,048-token prefill chunk: 16 MiB of activations, 0.67 ms on the link
    chunk = allreduce_seconds(2048)
    assert chunk - ALLREDUCE_LATENCY_S == pytest.approx(2048 * DEFAULT_HIDDEN_SIZE * 2 / 25e9)
    assert allreduce_seconds(1, tp=1) == 0.0
    assert allreduce_seconds(0) == 0.0


def test_a_step_pays_two_allreduces_per_layer():
    arch = _arch()
    assert step_comm_seconds(arch, 1) == pytest.approx(arch.num_layers * 2 * allreduce_seconds(1))
    assert step_comm_seconds(arch, 1, tp=1) == 0.0
    assert step_comm_seconds(replace(arch, num_layers=None), 1) == 0.0


def test_a_pair_plans_half_the_weights_on_each_spark():
    arch, flags = _arch(), Flags(0.85, 32768, 4, tensor_parallel_size=2)
    one = plan(arch, replace(flags, tensor_parallel_size=1))
    two = plan(arch, flags)
    assert two.weights_bytes == pytest.approx(one.weights_bytes / 2)
    assert two.kv_bytes_per_sequence == pytest.approx(one.kv_bytes_per_sequence / 2)
    # More KV fits per Spark: the other half of the weights is on the other one.
    assert two.kv_available_bytes > one.kv_available_bytes


def test_the_pair_ceiling_is_below_twice_one_spark_by_the_link():
    arch, flags = _arch(), Flags(0.85, 32768, 1, tensor_parallel_size=2)
    one = plan(arch, replace(flags, tensor_parallel_size=1)).decode_ceiling_tps
    two = plan(arch, flags).decode_ceiling_tps
    per_token_one = 1 / one
    # each Spark reads half in parallel, then the all-reduces of one token per layer
    assert 1 / two == pytest.approx(per_token_one / 2 + step_comm_seconds(arch, 1))
    assert one < two < 2 * one


def test_each_side_is_planned_with_its_own_spec_and_the_worse_decides():
    arch, flags = _arch("qwen3.5-122b-a10b-nvfp4"), Flags(0.85, 262144, 8, tensor_parallel_size=2)
    big = pair.Side("spark-1", "head", HostSpec())
    result = pair.plan_pair(arch, flags, big, pair.Side("spark-2", "worker", HostSpec()))
    assert [p.verdict for p in result.plans] == [result.verdict] * 2
    # The worker Spark with a smaller device (a different spec) is the side that decides.
    small = pair.Side("spark-2", "worker", HostSpec(cuda_visible_gib=60, physical_memory_gb=70))
    mixed = pair.plan_pair(arch, flags, big, small)
    assert mixed.plans[0].verdict == result.plans[0].verdict
    assert mixed.plans[1].kv_available_bytes < mixed.plans[0].kv_available_bytes
    side, worst = mixed.worst()
    assert worst.kv_available_bytes == mixed.plans[1].kv_available_bytes
    if mixed.verdict is not result.verdict:
        assert side.name == "spark-2"
    assert mixed.plans[1].weights_bytes == pytest.approx(
        plan(arch, replace(flags, tensor_parallel_size=1)).weights_bytes / 2
    )


def test_a_pair_plan_refuses_a_recipe_without_tensor_parallel_two():
    side = pair.Side("a", "head", HostSpec())
    with pytest.raises(ValueError, match="tensor parallel 2"):
        pair.plan_pair(_arch(), Flags(0.85, 8192, 1), side, side)


def test_a_model_too_big_for_one_spark_fits_a_pair():
    # ~200 GB of weights: more than one Spark's pool, half of it fits each side of a pair.
    arch = Architecture(total_params_b=397, active_params_b=17, weight_format="nvfp4",
                        weight_gb=200, num_layers=60, kv_heads=2, head_dim=256)  # fmt: skip
    flags = Flags(0.9, 32768, 2, tensor_parallel_size=2)
    assert plan(arch, replace(flags, tensor_parallel_size=1)).verdict is Verdict.DOES_NOT_FIT
    pair_plan = pair.plan_pair(
        arch, flags, pair.Side("a", "head", HostSpec()), pair.Side("b", "worker", HostSpec())
    )
    assert pair_plan.verdict in (Verdict.FITS, Verdict.TIGHT)
    assert pair_plan.plans[0].weights_bytes == pytest.approx(100 * GB)


def test_minimax_m2_pays_a_third_all_reduce_a_layer_for_its_whole_qk_norm():
    """vLLM's MiniMax-M2 attention all-reduces the q/k variance across ranks before its
    RMSNorm (rms_norm_tp.py): three all-reduces a layer under TP, not two."""
    from sparkdomain.planner.link import allreduces_per_layer

    minimax = {"architectures": ["MiniMaxM2ForCausalLM"], "use_qk_norm": True,
               "qk_norm_type": "per_layer", "num_hidden_layers": 62}  # fmt: skip
    assert allreduces_per_layer(minimax) == 3
    assert allreduces_per_layer({"architectures": ["Qwen3MoeForCausalLM"]}) == 2
    # Per-head q/k norms (Qwen3) stay on each rank.
    assert (
        allreduces_per_layer({"architectures": ["Qwen3ForCausalLM"], "qk_norm_type": "per_head"})
        == 2
    )
    arch = Architecture(num_layers=62, tp_allreduces_per_layer=3)
    assert step_comm_seconds(arch, 1) == pytest.approx(62 * 3 * allreduce_seconds(1))
