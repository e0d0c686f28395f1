"""The memory planner and decode roofline for vLLM on a DGX Spark.

Pure Python, no Django: the wizard, the recipe page, the API and the benchmarks all call
`plan()` with plain values. Every formula is in ../shared/SPEC.md §2 and §4 and in
docs/recipes.md; tests pin hand-computed values.

The memory model, per Spark:

    physical memory = OS reserve + vLLM pool + headroom
    vLLM pool       = utilization × memory CUDA reports (121.7 GiB on GB10)
                    = CUDA context + CUDA graphs + weights + KV cache available
    KV needed       = max_num_seqs × (KV per sequence at max_model_len + recurrent state)

Where an input is unknown the planner leaves the dependent outputs as None and says what
it cannot compute (`Plan.unknowns`) instead of inventing a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from enum import StrEnum

from sparkdomain import spark
from sparkdomain.spark import GB, GIB, MIB

# Bytes per parameter by weight format. NVFP4 is 4-bit values plus one fp8 scale per 16
# (4.5 bits); MXFP4 and group-128 int4 (AWQ/GPTQ) carry 8 or 16 bits of scale per 32 or
# 128 values (4.25 bits). Seed 001's "bytes/param" figures are slips for bits.
BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "nvfp4": 4.5 / 8,
    "mxfp4": 4.25 / 8,
    "int4": 4.25 / 8,
}
KV_ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# SPEC §2: "tight" when the KV the workload needs is 70-100 % of what is available.
TIGHT_RATIO = 0.70
LONG_CONTEXT_TOKENS = 32768  # beyond this the seeds recommend utilization 0.80
FP8_KV_SUGGESTED_FROM = 32768
HUGE_BATCHED_TOKENS = 16384
HIGH_MAX_NUM_SEQS = 10


class Verdict(StrEnum):
    FITS = "fits"
    TIGHT = "tight"
    DOES_NOT_FIT = "does not fit"
    UNKNOWN = "unknown"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    DANGER = "danger"


@dataclass(frozen=True)
class Architecture:
    total_params_b: float | None = None
    active_params_b: float | None = None  # None for a dense model
    weight_format: str = "bf16"
    weight_gb: float | None = None  # actual checkpoint size; beats params × bytes
    num_layers: int | None = None
    attention_layers: int | None = None  # layers that keep KV (full + sliding); None = all
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None  # MLA (DeepSeek): one compressed latent per token
    qk_rope_head_dim: int | None = None
    sliding_window_layers: int | None = None  # how many attention layers are sliding
    sliding_window: int | None = None
    recurrent_state_mib: float | None = None  # Mamba / linear-attention state per sequence
    checkpoint_kv_dtype: str = ""  # what kv_cache_dtype=auto becomes; "" = model dtype

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank) and self.qk_rope_head_dim is not None

    @property
    def is_moe(self) -> bool:
        return (
            self.active_params_b is not None
            and self.total_params_b is not None
            and self.active_params_b < self.total_params_b
        )


@dataclass(frozen=True)
class Flags:
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int = 1
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class HostSpec:
    physical_memory_gb: float = spark.PHYSICAL_MEMORY_GB
    cuda_visible_gib: float = spark.CUDA_VISIBLE_GIB
    bandwidth_gbs: float = spark.BANDWIDTH_GBS
    os_reserve_gb: float = spark.OS_RESERVE_GB
    cuda_context_gb: float = spark.CUDA_CONTEXT_GB
    cuda_graphs_gb: float = spark.CUDA_GRAPHS_GB
    freeze_margin_gb: float = spark.FREEZE_MARGIN_GB  # the guard's act line
    warn_margin_gb: float = spark.WATCHDOG_WARN_GB  # the guard's warn line


@dataclass(frozen=True)
class PlanWarning:
    code: str
    severity: Severity
    message: str


@dataclass(frozen=True)
class BudgetSegment:
    key: str
    label: str
    bytes: float


@dataclass
class Plan:
    weights_bytes: float | None
    active_weight_bytes: float | None
    kv_element_bytes: int
    kv_bytes_per_token: float | None
    kv_bytes_per_sequence: float | None  # at max_model_len, recurrent state excluded
    state_bytes_per_sequence: float
    os_reserve_bytes: float
    cuda_context_bytes: float
    cuda_graphs_bytes: float
    pool_bytes: float
    headroom_bytes: float
    kv_available_bytes: float | None
    kv_needed_bytes: float | None
    tokens_that_fit: int | None
    max_concurrency: int | None
    verdict: Verdict
    largest_safe_utilization: Decimal
    min_utilization_to_fit: Decimal | None
    recommended_utilization: Decimal
    recommendation_reason: str
    decode_ceiling_tps: float | None
    decode_ceiling_full_context_tps: float | None
    decode_ceiling_batch_tps: float | None
    physical_bytes: float
    warnings: list[PlanWarning] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)

    @property
    def kv_usage_ratio(self) -> float | None:
        if self.kv_needed_bytes is None or not self.kv_available_bytes:
            return None
        if self.kv_available_bytes <= 0:
            return None
        return self.kv_needed_bytes / self.kv_available_bytes

    def budget(self) -> list[BudgetSegment]:
        """The physical memory split for a stacked bar; sums to physical memory."""
        segments = [
            BudgetSegment("os", "OS and services", self.os_reserve_bytes),
            BudgetSegment("cuda", "CUDA context", self.cuda_context_bytes),
            BudgetSegment("graphs", "CUDA graphs", self.cuda_graphs_bytes),
        ]
        if self.weights_bytes is not None:
            segments.append(BudgetSegment("weights", "Weights", self.weights_bytes))
        if self.kv_available_bytes is not None and self.kv_available_bytes > 0:
            needed = min(self.kv_needed_bytes or 0.0, self.kv_available_bytes)
            segments.append(BudgetSegment("kv", "KV cache needed", needed))
            segments.append(
                BudgetSegment("kv-spare", "KV cache spare", self.kv_available_bytes - needed)
            )
        elif self.weights_bytes is None:
            rest = self.pool_bytes - self.cuda_context_bytes - self.cuda_graphs_bytes
            segments.append(BudgetSegment("unknown", "Weights + KV (unknown)", max(rest, 0.0)))
        segments.append(BudgetSegment("headroom", "Headroom", max(self.headroom_bytes, 0.0)))
        return segments


@dataclass(frozen=True)
class RooflineCheck:
    measured_tps: float
    ceiling_tps: float
    percent: float
    plausible: bool
    message: str


# --- pieces ------------------------------------------------------------------------------


def bytes_per_param(weight_format: str) -> float:
    try:
        return BYTES_PER_PARAM[weight_format]
    except KeyError:
        raise ValueError(
            f"unknown weight format {weight_format!r}: expected one of "
            + ", ".join(sorted(BYTES_PER_PARAM))
        ) from None


def weight_bytes(arch: Architecture) -> float | None:
    if arch.weight_gb is not None:
        return arch.weight_gb * GB
    if arch.total_params_b is None:
        return None
    return arch.total_params_b * 1e9 * bytes_per_param(arch.weight_format)


def active_weight_bytes(arch: Architecture) -> float | None:
    """Bytes one decode step reads for one token: the active parameters, once."""
    if arch.active_params_b is not None:
        return arch.active_params_b * 1e9 * bytes_per_param(arch.weight_format)
    # A dense model reads all its weights every step.
    return weight_bytes(arch)


def kv_element_bytes(arch: Architecture, kv_cache_dtype: str) -> int:
    if kv_cache_dtype.startswith("fp8"):
        return 1
    if kv_cache_dtype in KV_ELEMENT_BYTES:
        return KV_ELEMENT_BYTES[kv_cache_dtype]
    # "auto": the checkpoint's KV dtype if it declares one, else the model's dtype
    # (quantized weights still compute and cache in bf16).
    if arch.checkpoint_kv_dtype in KV_ELEMENT_BYTES:
        return KV_ELEMENT_BYTES[arch.checkpoint_kv_dtype]
    return KV_ELEMENT_BYTES.get(arch.weight_format, 2)


def _kv_layers(arch: Architecture) -> tuple[int, int] | None:
    """(full-attention layers, sliding-window layers), or None if unknown."""
    layers = arch.attention_layers if arch.attention_layers is not None else arch.num_layers
    if layers is None:
        return None
    # Sliding layers only cap their KV when a window is known.
    sliding = min(arch.sliding_window_layers or 0, layers) if arch.sliding_window else 0
    return layers - sliding, sliding


def kv_bytes_per_token_split(arch: Architecture, element_bytes: int) -> tuple[float, float] | None:
    """KV bytes one token adds: (in full-attention layers, in sliding-window layers).

    Standard attention: 2 (K and V) × layers × kv_heads × head_dim × bytes.
    MLA: layers × (kv_lora_rank + qk_rope_head_dim) × bytes (one latent, no K/V pair).
    """
    layers = _kv_layers(arch)
    if layers is None:
        return None
    full, sliding = layers
    if arch.is_mla:
        per_layer = (arch.kv_lora_rank + arch.qk_rope_head_dim) * element_bytes
    elif arch.kv_heads is not None and arch.head_dim is not None:
        per_layer = 2 * arch.kv_heads * arch.head_dim * element_bytes
    else:
        return None
    return float(full * per_layer), float(sliding * per_layer)


def kv_bytes_per_sequence(arch: Architecture, element_bytes: int, context: int) -> float | None:
    split = kv_bytes_per_token_split(arch, element_bytes)
    if split is None:
        return None
    full, sliding = split
    window = arch.sliding_window or context
    return full * context + sliding * min(context, window)


def _floor2(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_FLOOR)


def _ceil2(value: float) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_CEILING)


def recommended_utilization(arch: Architecture, flags: Flags) -> tuple[Decimal, str]:
    """Seed 004's starting values by model size (SPEC §1)."""
    if flags.max_model_len > LONG_CONTEXT_TOKENS:
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


def roofline_check(measured_tps: float, ceiling_tps: float) -> RooflineCheck:
    """A measured decode rate as a share of its bandwidth ceiling; above 100 % is not
    physically possible for one stream without speculative decoding (SPEC §4)."""
    if ceiling_tps <= 0:
        raise ValueError("the ceiling must be positive")
    percent = measured_tps / ceiling_tps * 100
    plausible = percent <= 100.0
    if plausible:
        message = (
            f"{measured_tps:.1f} tok/s is {percent:.0f} % of the {ceiling_tps:.1f} tok/s ceiling."
        )
    else:
        message = (
            f"{measured_tps:.1f} tok/s is {percent:.0f} % of the {ceiling_tps:.1f} tok/s "
            "bandwidth ceiling: above 100 % is physically implausible (each token must read "
            "the active weights once); check the model, speculative decoding or the measurement."
        )
    return RooflineCheck(measured_tps, ceiling_tps, percent, plausible, message)


# --- the plan ------------------------------------------------------------------------------


def kv_verdict(kv_available: float | None, kv_needed: float | None) -> Verdict:
    """Fits / tight / does not fit, from the KV cache available and needed (bytes)."""
    if kv_available is None or kv_needed is None:
        return Verdict.UNKNOWN
    if kv_available <= 0 or kv_needed > kv_available:
        return Verdict.DOES_NOT_FIT
    if kv_needed >= TIGHT_RATIO * kv_available:
        return Verdict.TIGHT
    return Verdict.FITS


def plan(arch: Architecture, flags: Flags, host: HostSpec | None = None) -> Plan:
    host = host or HostSpec()
    _check_inputs(flags)
    tp = max(flags.tensor_parallel_size, 1)
    warnings: list[PlanWarning] = []
    unknowns: list[str] = []

    def warn(code: str, severity: Severity, message: str) -> None:
        warnings.append(PlanWarning(code, severity, message))

    util = flags.gpu_memory_utilization
    visible = host.cuda_visible_gib * GIB
    physical = host.physical_memory_gb * GB
    os_reserve = host.os_reserve_gb * GB
    context_bytes = host.cuda_context_gb * GB
    graphs = 0.0 if flags.enforce_eager else host.cuda_graphs_gb * GB
    pool = util * visible
    headroom = physical - os_reserve - pool

    weights = weight_bytes(arch)
    if weights is not None:
        weights /= tp
    else:
        unknowns.append(
            "Weight size: enter the total parameters (or the checkpoint size in GB) to plan memory."
        )
    active = active_weight_bytes(arch)
    if active is None:
        unknowns.append(
            "Decode ceiling: needs the active parameters (or the total for a dense model)."
        )

    element = kv_element_bytes(arch, flags.kv_cache_dtype)
    split = kv_bytes_per_token_split(arch, element)
    per_token = None if split is None else sum(split) / tp
    per_seq = kv_bytes_per_sequence(arch, element, flags.max_model_len)
    if per_seq is not None:
        per_seq /= tp
    else:
        unknowns.append(
            "KV cache: needs the number of layers (or attention layers), KV heads and head "
            "dim — or kv_lora_rank and qk_rope_head_dim for an MLA model."
        )
    state = (arch.recurrent_state_mib or 0.0) * MIB / tp

    kv_available = None if weights is None else pool - context_bytes - graphs - weights
    kv_needed = None if per_seq is None else flags.max_num_seqs * (per_seq + state)
    tokens_fit = max_conc = None
    if kv_available is not None and per_token:
        tokens_fit = max(0, math.floor(max(kv_available - state, 0.0) / per_token))
    if kv_available is not None and per_seq is not None and per_seq + state > 0:
        # A vanishingly small sequence (a denormal per-token size) would overflow to inf.
        ratio = max(kv_available, 0.0) / (per_seq + state)
        max_conc = max(0, math.floor(ratio)) if math.isfinite(ratio) else None

    verdict = kv_verdict(kv_available, kv_needed)

    safe = largest_safe_utilization(host)
    min_util = None
    if weights is not None and kv_needed is not None:
        min_util = _ceil2((context_bytes + graphs + weights + kv_needed) / visible)
    rec, rec_reason = recommended_utilization(arch, flags)

    # --- warnings, most serious first --------------------------------------------------
    if headroom < host.freeze_margin_gb * GB:
        verdict = Verdict.DOES_NOT_FIT
        warn(
            "freeze-risk",
            Severity.DANGER,
            f"Only {headroom / GB:.1f} GB would stay free outside vLLM's pool (OS reserve "
            f"{host.os_reserve_gb:g} GB): below {host.freeze_margin_gb:g} GB a Spark can "
            f"freeze. Use at most {safe} on this host.",
        )
    elif headroom < host.warn_margin_gb * GB:
        # Fits the pool, but the host would run below the guard's warn line from the first
        # minute: every run would raise a memory warning (one set of rules).
        if verdict is Verdict.FITS:
            verdict = Verdict.TIGHT
        warn(
            "below-warn-line",
            Severity.WARNING,
            f"Only {headroom / GB:.1f} GB would stay free outside vLLM's pool: below the "
            f"memory guard's {host.warn_margin_gb:g} GB warn line, so every run on this host "
            f"raises a memory warning. Use at most {safe} here.",
        )
    if weights is not None and kv_available is not None and kv_available <= 0:
        warn(
            "weights-exceed-pool",
            Severity.DANGER,
            f"The weights ({weights / GB:.1f} GB) plus CUDA context and graphs do not fit in "
            f"vLLM's pool ({pool / GB:.1f} GB at utilization {util:g}): vLLM will fail to start.",
        )
    elif kv_available is not None and per_seq is not None and per_seq + state > kv_available:
        warn(
            "sequence-exceeds-kv",
            Severity.DANGER,
            f"One sequence at max_model_len {flags.max_model_len:,} needs "
            f"{(per_seq + state) / GB:.2f} GB of KV cache but only {kv_available / GB:.2f} GB "
            "is available: vLLM will refuse to start. Lower max_model_len or use fp8 KV.",
        )
    if Decimal(str(util)) > rec:
        warn(
            "above-recommended",
            Severity.WARNING,
            f"Utilization {util:g} is above the {rec} recommended for {rec_reason}.",
        )
    if element >= 2 and flags.max_model_len >= FP8_KV_SUGGESTED_FROM and per_seq:
        warn(
            "fp16-kv-long-context",
            Severity.WARNING,
            f"{_kv_name(element)} KV cache with a {flags.max_model_len:,}-token context: "
            "--kv-cache-dtype fp8 halves KV memory (under 2 % quality loss on most benchmarks).",
        )
    if flags.max_num_batched_tokens and flags.max_num_batched_tokens > HUGE_BATCHED_TOKENS:
        warn(
            "huge-batched-tokens",
            Severity.WARNING,
            f"--max-num-batched-tokens {flags.max_num_batched_tokens:,}: large prefill batches "
            "need activation memory from the same pool and have frozen Sparks; keep it at "
            f"{HUGE_BATCHED_TOKENS:,} or less.",
        )
    if flags.max_num_seqs > HIGH_MAX_NUM_SEQS:
        warn(
            "many-seqs",
            Severity.INFO,
            f"--max-num-seqs {flags.max_num_seqs}: the seeds recommend 4–10 on a Spark; "
            "decode bandwidth is shared by every running sequence.",
        )
    if tp > 1:
        warn(
            "tensor-parallel",
            Severity.INFO,
            f"Tensor parallelism {tp}: figures are per Spark and assume an ideal split over "
            f"{tp} Sparks linked by ConnectX (multi-Spark runs are planned, not built yet).",
        )

    # Decode roofline: one step reads the active weights once plus every running
    # stream's KV (and recurrent state); each Spark reads its 1/tp share in parallel.
    bandwidth = host.bandwidth_gbs * GB
    ceiling = ceiling_full = ceiling_batch = None
    if active:
        per_node_active = active / tp
        ceiling = bandwidth / per_node_active
        if per_seq is not None:
            stream = per_seq + state
            ceiling_full = bandwidth / (per_node_active + stream)
            n = flags.max_num_seqs
            ceiling_batch = n * bandwidth / (per_node_active + n * stream)

    return Plan(
        weights_bytes=weights,
        active_weight_bytes=active,
        kv_element_bytes=element,
        kv_bytes_per_token=per_token,
        kv_bytes_per_sequence=per_seq,
        state_bytes_per_sequence=state,
        os_reserve_bytes=os_reserve,
        cuda_context_bytes=context_bytes,
        cuda_graphs_bytes=graphs,
        pool_bytes=pool,
        headroom_bytes=headroom,
        kv_available_bytes=kv_available,
        kv_needed_bytes=kv_needed,
        tokens_that_fit=tokens_fit,
        max_concurrency=max_conc,
        verdict=verdict,
        largest_safe_utilization=safe,
        min_utilization_to_fit=min_util,
        recommended_utilization=rec,
        recommendation_reason=rec_reason,
        decode_ceiling_tps=ceiling,
        decode_ceiling_full_context_tps=ceiling_full,
        decode_ceiling_batch_tps=ceiling_batch,
        physical_bytes=physical,
        warnings=warnings,
        unknowns=unknowns,
    )


def does_not_fit_reason(result: Plan) -> str | None:
    """Why the planner says "does not fit" (None when it does not say so): its most
    serious warning, else the KV cache the workload needs against what is available."""
    if result.verdict is not Verdict.DOES_NOT_FIT:
        return None
    for warning in result.warnings:
        if warning.severity is Severity.DANGER:
            return warning.message
    needed, available = result.kv_needed_bytes or 0.0, result.kv_available_bytes or 0.0
    return (
        f"The workload needs {needed / GB:.1f} GB of KV cache but only {available / GB:.1f} GB "
        "is available in vLLM's pool: lower max_num_seqs or max_model_len, or use fp8 KV."
    )


def _kv_name(element: int) -> str:
    return {1: "fp8", 2: "16-bit", 4: "fp32"}[element]


def _check_inputs(flags: Flags) -> None:
    if not 0 < flags.gpu_memory_utilization <= float(spark.MAX_GPU_MEMORY_UTILIZATION):
        raise ValueError(spark.UTILIZATION_RULE)
    if flags.max_model_len < 1 or flags.max_num_seqs < 1:
        raise ValueError("max_model_len and max_num_seqs must be at least 1")
