"""gpu_memory_utilization: the seeds' recommended starting value, the largest value this
host keeps safe (never above the ≤ 0.90 rule, spark.MAX_GPU_MEMORY_UTILIZATION) and the
smallest value at which the workload fits."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from sparkdomain import spark
from sparkdomain.planner.budget import MemorySplit
from sparkdomain.planner.inputs import Architecture, Flags, HostSpec
from sparkdomain.planner.sizes import bytes_per_param
from sparkdomain.spark import GB, GIB

LONG_CONTEXT_TOKENS = 32768  # beyond this the seeds recommend utilization 0.80


def _floor2(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)


def _ceil2(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_CEILING)


def recommended_utilization(arch: Architecture, flags: Flags) -> tuple[Decimal, str]:
    """Seed 004's starting values by model size (SPEC §1)."""
    if (flags.max_model_len or 0) > LONG_CONTEXT_TOKENS:
        return Decimal("0.80"), "long context (extra margin for a large KV cache)"
    total = arch.total_params_b
    if total is None and arch.weight_gb is not None:
        total = arch.weight_gb / bytes_per_param(arch.weight_format)
    if total is None:
        return spark.MAX_GPU_MEMORY_UTILIZATION, "model size unknown"
    if total <= 35:
        return Decimal("0.90"), "models up to 35B (small weights, room to spare)"
    if arch.is_moe:
        return Decimal("0.85"), "large MoE models (weights alone take tens of GB)"
    return Decimal("0.85"), "large dense models (keep ~15 GB for the system and KV overflow)"


def largest_safe_utilization(host: HostSpec) -> Decimal:
    """The highest utilization that keeps the guard's warn line free (and so the freeze
    margin below it), never above 0.90: a value the planner calls safe must not raise the
    host's memory warning (on a stock Spark (128 − 6 − 4) GB / 130.67 GB = 0.903 → 0.90)."""
    margin = max(host.warn_margin_gb, host.freeze_margin_gb)
    usable = host.physical_memory_gb - host.os_reserve_gb - margin
    by_memory = _floor2(max(usable, 0.0) * GB / (host.cuda_visible_gib * GIB))
    return min(spark.MAX_GPU_MEMORY_UTILIZATION, by_memory)


def min_utilization_to_fit(
    memory: MemorySplit, weights: float | None, kv_needed: float | None
) -> Decimal | None:
    """The utilization whose pool holds context, graphs, weights and the KV needed."""
    if weights is None or kv_needed is None:
        return None
    return _ceil2((memory.cuda_context + memory.cuda_graphs + weights + kv_needed) / memory.visible)


def startable_now(available_bytes: int, cuda_total_gib: float,
                  freeze_margin_gb: float) -> tuple[Decimal, Decimal]:  # fmt: skip
    """The largest utilization a start could ask for now: (the panel's, vLLM's gate).

    vLLM refuses a start when the free memory CUDA reports is below `ceil(total × util)`;
    on a GB10 that free figure is the kernel's MemAvailable (vLLM's utils/mem_utils.py reads
    psutil.virtual_memory().available for an integrated GPU), which the host agent reads
    from /proc/meminfo. The panel also keeps the guard's freeze margin free and never goes
    above 0.90. Both floored to two decimals."""
    total = cuda_total_gib * GIB
    if total <= 0:
        return Decimal("0"), Decimal("0")
    gate = _floor2(available_bytes / total)
    panel = _floor2((available_bytes - freeze_margin_gb * GB) / total)
    panel = max(Decimal("0"), min(panel, spark.MAX_GPU_MEMORY_UTILIZATION))
    return panel, max(gate, Decimal("0"))
