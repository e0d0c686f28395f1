"""Fits / tight / does not fit: the KV verdict, the headroom the guard's lines need (which
can overrule it) and the danger warnings that say why vLLM would not start."""

from __future__ import annotations

from decimal import Decimal

from sparkdomain.planner.budget import KvBudget, KvSizes, MemorySplit
from sparkdomain.planner.inputs import HostSpec
from sparkdomain.planner.results import Plan, PlanWarning, Severity, Verdict
from sparkdomain.spark import GB

# SPEC §2: "tight" when the KV the workload needs is 70-100 % of what is available.
TIGHT_RATIO = 0.70


def kv_verdict(kv_available: float | None, kv_needed: float | None) -> Verdict:
    """Fits / tight / does not fit, from the KV cache available and needed (bytes)."""
    if kv_available is None or kv_needed is None:
        return Verdict.UNKNOWN
    if kv_available <= 0 or kv_needed > kv_available:
        return Verdict.DOES_NOT_FIT
    if kv_needed >= TIGHT_RATIO * kv_available:
        return Verdict.TIGHT
    return Verdict.FITS


def headroom_check(
    verdict: Verdict, headroom: float, host: HostSpec, safe: Decimal
) -> tuple[Verdict, list[PlanWarning]]:
    """The verdict once the memory left outside vLLM's pool is weighed against the guard's
    freeze margin (does not fit) and warn line (at best tight)."""
    if headroom < host.freeze_margin_gb * GB:
        return Verdict.DOES_NOT_FIT, [
            PlanWarning(
                "freeze-risk",
                Severity.DANGER,
                f"Only {headroom / GB:.1f} GB would stay free outside vLLM's pool (OS reserve "
                f"{host.os_reserve_gb:g} GB): below {host.freeze_margin_gb:g} GB a Spark can "
                f"freeze. Use at most {safe} on this host.",
            )
        ]
    if headroom < host.warn_margin_gb * GB:
        # Fits the pool, but the host would run below the guard's warn line from the first
        # minute: every run would raise a memory warning (one set of rules).
        if verdict is Verdict.FITS:
            verdict = Verdict.TIGHT
        return verdict, [
            PlanWarning(
                "below-warn-line",
                Severity.WARNING,
                f"Only {headroom / GB:.1f} GB would stay free outside vLLM's pool: below the "
                f"memory guard's {host.warn_margin_gb:g} GB warn line, so every run on this "
                f"host raises a memory warning. Use at most {safe} here.",
            )
        ]
    return verdict, []


def pool_warnings(
    memory: MemorySplit,
    weights: float | None,
    kv: KvSizes,
    budget: KvBudget,
    utilization: float,
    max_model_len: int,
) -> list[PlanWarning]:
    """Why vLLM would refuse to start: the weights overflow the pool, or one sequence's KV
    is more than the pool has left."""
    available, per_seq, state = budget.available, kv.per_sequence, kv.state_per_sequence
    if weights is not None and available is not None and available <= 0:
        return [
            PlanWarning(
                "weights-exceed-pool",
                Severity.DANGER,
                f"The weights ({weights / GB:.1f} GB) plus CUDA context and graphs do not fit "
                f"in vLLM's pool ({memory.pool / GB:.1f} GB at utilization {utilization:g}): "
                "vLLM will fail to start.",
            )
        ]
    if available is not None and per_seq is not None and per_seq + state > available:
        return [
            PlanWarning(
                "sequence-exceeds-kv",
                Severity.DANGER,
                f"One sequence at max_model_len {max_model_len:,} needs "
                f"{(per_seq + state) / GB:.2f} GB of KV cache but only {available / GB:.2f} GB "
                "is available: vLLM will refuse to start. Lower max_model_len or use fp8 KV.",
            )
        ]
    return []


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
