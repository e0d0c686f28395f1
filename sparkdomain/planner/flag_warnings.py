"""Warnings about the recipe's flags that do not change the verdict: utilization above the
recommendation, 16-bit KV at long context, huge prefill batches, many sequences, tensor
parallelism."""

from __future__ import annotations

from decimal import Decimal

from sparkdomain.planner.inputs import Flags
from sparkdomain.planner.results import PlanWarning, Severity

FP8_KV_SUGGESTED_FROM = 32768
HUGE_BATCHED_TOKENS = 16384
HIGH_MAX_NUM_SEQS = 10


def flag_warnings(
    flags: Flags,
    tp: int,
    recommended: tuple[Decimal, str],
    kv_element_bytes: int,
    kv_per_sequence: float | None,
) -> list[PlanWarning]:
    util = flags.gpu_memory_utilization
    rec, rec_reason = recommended
    warnings: list[PlanWarning] = []

    def warn(code: str, severity: Severity, message: str) -> None:
        warnings.append(PlanWarning(code, severity, message))

    if Decimal(str(util)) > rec:
        warn(
            "above-recommended",
            Severity.WARNING,
            f"Utilization {util:g} is above the {rec} recommended for {rec_reason}.",
        )
    if (
        kv_element_bytes >= 2
        and (flags.max_model_len or 0) >= FP8_KV_SUGGESTED_FROM
        and kv_per_sequence
    ):
        warn(
            "fp16-kv-long-context",
            Severity.WARNING,
            f"{_kv_name(kv_element_bytes)} KV cache with a {flags.max_model_len:,}-token "
            "context: --kv-cache-dtype fp8 halves KV memory (under 2 % quality loss on most "
            "benchmarks).",
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
            f"Tensor parallelism {tp}: figures are per Spark of a pair linked by ConnectX "
            "(each holds half the weights and half the KV cache); the decode ceiling includes "
            "the all-reduces over the link. It runs only on a Spark pair.",
        )
    return warnings


def _kv_name(element: float) -> str:
    return {1: "fp8", 2: "16-bit", 4: "fp32"}.get(element, f"{element * 8:g}-bit")
