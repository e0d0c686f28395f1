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

The package, by step: ``inputs`` (Architecture, Flags, HostSpec), ``sizes`` (weights and
KV bytes per model), ``budget`` (the memory split and the KV budget), ``utilization``
(recommended, largest safe, minimum to fit), ``verdict`` (fits / tight / does not fit and
its danger warnings), ``flag_warnings``, ``roofline`` (decode ceilings and the check of a
measured rate), ``results`` (Plan and friends) and ``memory_plan`` (``plan()`` itself).
Every public name is importable from ``sparkdomain.planner``.
"""

from sparkdomain.planner.budget import KvBudget, KvSizes, MemorySplit
from sparkdomain.planner.flag_warnings import (
    FP8_KV_SUGGESTED_FROM,
    HIGH_MAX_NUM_SEQS,
    HUGE_BATCHED_TOKENS,
)
from sparkdomain.planner.inputs import Architecture, Flags, HostSpec
from sparkdomain.planner.memory_plan import plan
from sparkdomain.planner.results import (
    BudgetSegment,
    Plan,
    PlanWarning,
    RooflineCheck,
    Severity,
    Verdict,
)
from sparkdomain.planner.roofline import roofline_check
from sparkdomain.planner.sizes import (
    BYTES_PER_PARAM,
    KV_ELEMENT_BYTES,
    active_weight_bytes,
    bytes_per_param,
    kv_bytes_per_sequence,
    kv_bytes_per_token_split,
    kv_element_bytes,
    weight_bytes,
)
from sparkdomain.planner.utilization import (
    LONG_CONTEXT_TOKENS,
    largest_safe_utilization,
    recommended_utilization,
)
from sparkdomain.planner.verdict import TIGHT_RATIO, does_not_fit_reason, kv_verdict

__all__ = [
    "BYTES_PER_PARAM",
    "FP8_KV_SUGGESTED_FROM",
    "HIGH_MAX_NUM_SEQS",
    "HUGE_BATCHED_TOKENS",
    "KV_ELEMENT_BYTES",
    "LONG_CONTEXT_TOKENS",
    "TIGHT_RATIO",
    "Architecture",
    "BudgetSegment",
    "Flags",
    "HostSpec",
    "KvBudget",
    "KvSizes",
    "MemorySplit",
    "Plan",
    "PlanWarning",
    "RooflineCheck",
    "Severity",
    "Verdict",
    "active_weight_bytes",
    "bytes_per_param",
    "does_not_fit_reason",
    "kv_bytes_per_sequence",
    "kv_bytes_per_token_split",
    "kv_element_bytes",
    "kv_verdict",
    "largest_safe_utilization",
    "plan",
    "recommended_utilization",
    "roofline_check",
    "weight_bytes",
]
