"""The plan's memory steps: how the host's memory splits (OS reserve, vLLM's pool,
headroom), the weights and KV sizes per Spark, and the KV cache budget they leave."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sparkdomain.planner.inputs import Architecture, Flags, HostSpec
from sparkdomain.planner.sizes import (
    kv_bytes_per_sequence,
    kv_bytes_per_token_split,
    kv_element_bytes,
    weight_bytes,
)
from sparkdomain.spark import GB, GIB, MIB


@dataclass(frozen=True)
class MemorySplit:
    """Physical memory = OS reserve + vLLM pool + headroom; the pool holds the CUDA
    context, the CUDA graphs, the weights and the KV cache (bytes, per Spark)."""

    visible: float  # what CUDA reports; utilization is a share of it
    physical: float
    os_reserve: float
    cuda_context: float
    cuda_graphs: float
    pool: float
    headroom: float


@dataclass(frozen=True)
class KvSizes:
    """KV cache sizes per Spark (bytes); None where the architecture does not say."""

    element_bytes: int
    per_token: float | None
    per_sequence: float | None  # at max_model_len, recurrent state excluded
    state_per_sequence: float  # Mamba / linear-attention state


@dataclass(frozen=True)
class KvBudget:
    """The KV cache available in the pool against what the workload needs."""

    available: float | None
    needed: float | None
    tokens_that_fit: int | None
    max_concurrency: int | None


def memory_split(flags: Flags, host: HostSpec) -> MemorySplit:
    visible = host.cuda_visible_gib * GIB
    physical = host.physical_memory_gb * GB
    os_reserve = host.os_reserve_gb * GB
    pool = flags.gpu_memory_utilization * visible
    return MemorySplit(
        visible=visible,
        physical=physical,
        os_reserve=os_reserve,
        cuda_context=host.cuda_context_gb * GB,
        cuda_graphs=0.0 if flags.enforce_eager else host.cuda_graphs_gb * GB,
        pool=pool,
        headroom=physical - os_reserve - pool,
    )


def weights_per_spark(arch: Architecture, tp: int) -> float | None:
    """The weights each of `tp` Sparks holds (bytes), None when the size is unknown."""
    weights = weight_bytes(arch)
    if weights is not None:
        weights /= tp
    return weights


def kv_sizes(arch: Architecture, flags: Flags, tp: int) -> KvSizes:
    element = kv_element_bytes(arch, flags.kv_cache_dtype)
    split = kv_bytes_per_token_split(arch, element)
    per_seq = kv_bytes_per_sequence(arch, element, flags.max_model_len)
    if per_seq is not None:
        per_seq /= tp
    return KvSizes(
        element_bytes=element,
        per_token=None if split is None else sum(split) / tp,
        per_sequence=per_seq,
        state_per_sequence=(arch.recurrent_state_mib or 0.0) * MIB / tp,
    )


def kv_budget(
    memory: MemorySplit, weights: float | None, kv: KvSizes, max_num_seqs: int
) -> KvBudget:
    """What is left of the pool for KV after context, graphs and weights, what
    max_num_seqs sequences at max_model_len need, and how many tokens/sequences fit."""
    per_seq, state = kv.per_sequence, kv.state_per_sequence
    available = (
        None
        if weights is None
        else memory.pool - memory.cuda_context - memory.cuda_graphs - weights
    )
    needed = None if per_seq is None else max_num_seqs * (per_seq + state)
    tokens_fit = max_conc = None
    if available is not None and kv.per_token:
        tokens_fit = max(0, math.floor(max(available - state, 0.0) / kv.per_token))
    if available is not None and per_seq is not None and per_seq + state > 0:
        # A vanishingly small sequence (a denormal per-token size) would overflow to inf.
        ratio = max(available, 0.0) / (per_seq + state)
        max_conc = max(0, math.floor(ratio)) if math.isfinite(ratio) else None
    return KvBudget(available, needed, tokens_fit, max_conc)
