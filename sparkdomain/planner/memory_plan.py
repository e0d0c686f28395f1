"""plan(): the memory plan and decode roofline of one recipe on one host, step by step.

Each step is a small function in its own module (budget, utilization, verdict,
flag_warnings, roofline); plan() only strings them together and fills in the Plan.
"""

from __future__ import annotations

from sparkdomain import spark
from sparkdomain.capacity import DEFAULT_SLO_TPS
from sparkdomain.planner.budget import kv_budget, kv_sizes, memory_split, weights_per_spark
from sparkdomain.planner.flag_warnings import flag_warnings
from sparkdomain.planner.inputs import Architecture, Flags, HostSpec
from sparkdomain.planner.link import step_comm_seconds
from sparkdomain.planner.results import Plan
from sparkdomain.planner.roofline import decode_ceilings, users_at_rate
from sparkdomain.planner.sizes import active_weight_bytes
from sparkdomain.planner.utilization import (
    largest_safe_utilization,
    min_utilization_to_fit,
    recommended_utilization,
)
from sparkdomain.planner.verdict import headroom_check, kv_verdict, pool_warnings


def plan(
    arch: Architecture, flags: Flags, host: HostSpec | None = None, slo_tps: float = DEFAULT_SLO_TPS
) -> Plan:
    """`slo_tps`: the per-user decode rate a user must keep (the benchmark suites' default
    SLO unless a suite says otherwise), for the latency bound on users."""
    host = host or HostSpec()
    _check_inputs(flags)
    tp = max(flags.tensor_parallel_size, 1)

    memory = memory_split(flags, host)
    weights = weights_per_spark(arch, tp)
    active = active_weight_bytes(arch)
    kv = kv_sizes(arch, flags, tp)
    budget = kv_budget(memory, weights, kv, flags.max_num_seqs)

    safe = largest_safe_utilization(host)
    rec, rec_reason = recommended_utilization(arch, flags)

    # Warnings, most serious first; the headroom can overrule the KV verdict.
    verdict, warnings = headroom_check(
        kv_verdict(budget.available, budget.needed), memory.headroom, host, safe
    )
    warnings += pool_warnings(
        memory, weights, kv, budget, flags.gpu_memory_utilization, flags.max_model_len
    )
    warnings += flag_warnings(flags, tp, (rec, rec_reason), kv.element_bytes, kv.per_sequence)

    def comm(tokens: int) -> float:
        return step_comm_seconds(arch, tokens, tp=tp)

    ceiling, ceiling_full, ceiling_batch = decode_ceilings(
        active, kv, tp, flags.max_num_seqs, host.bandwidth_gbs, comm
    )
    return Plan(
        weights_bytes=weights,
        active_weight_bytes=active,
        kv_element_bytes=kv.element_bytes,
        kv_bytes_per_token=kv.per_token,
        kv_bytes_per_sequence=kv.per_sequence,
        state_bytes_per_sequence=kv.state_per_sequence,
        os_reserve_bytes=memory.os_reserve,
        cuda_context_bytes=memory.cuda_context,
        cuda_graphs_bytes=memory.cuda_graphs,
        pool_bytes=memory.pool,
        headroom_bytes=memory.headroom,
        kv_available_bytes=budget.available,
        kv_needed_bytes=budget.needed,
        tokens_that_fit=budget.tokens_that_fit,
        max_concurrency=budget.max_concurrency,
        verdict=verdict,
        largest_safe_utilization=safe,
        min_utilization_to_fit=min_utilization_to_fit(memory, weights, budget.needed),
        recommended_utilization=rec,
        recommendation_reason=rec_reason,
        decode_ceiling_tps=ceiling,
        decode_ceiling_full_context_tps=ceiling_full,
        decode_ceiling_batch_tps=ceiling_batch,
        physical_bytes=memory.physical,
        max_num_seqs=flags.max_num_seqs,
        slo_tps=slo_tps,
        users_at_slo_rate=users_at_rate(active, kv, tp, slo_tps, host.bandwidth_gbs, comm),
        warnings=warnings,
        unknowns=_unknowns(weights, active, kv.per_sequence, flags),
    )


def _unknowns(
    weights: float | None, active: float | None, kv_per_sequence: float | None, flags: Flags
) -> list[str]:
    """What the planner cannot compute, in sentences that say which input is missing."""
    unknowns = []
    if weights is None:
        unknowns.append(
            "Weight size: enter the total parameters (or the checkpoint size in GB) to plan memory."
        )
    if active is None:
        unknowns.append(
            "Decode ceiling: needs the active parameters (or the total for a dense model)."
        )
    if kv_per_sequence is None and flags.max_model_len is None:
        unknowns.append(
            "Context: max model len is blank (or auto), so vLLM uses the model's own context; "
            "enter it (config.json's max_position_embeddings) or a max model len."
        )
    elif kv_per_sequence is None:
        unknowns.append(
            "KV cache: needs the number of layers (or attention layers), KV heads and head "
            "dim — or kv_lora_rank and qk_rope_head_dim for an MLA model."
        )
    return unknowns


def _check_inputs(flags: Flags) -> None:
    if not 0 < flags.gpu_memory_utilization <= float(spark.MAX_GPU_MEMORY_UTILIZATION):
        raise ValueError(spark.UTILIZATION_RULE)
    if (flags.max_model_len is not None and flags.max_model_len < 1) or flags.max_num_seqs < 1:
        raise ValueError("max_model_len and max_num_seqs must be at least 1")
