"""What the planner answers: the plan (memory split, KV budget, verdict, utilization,
decode ceilings, warnings, unknowns) and the roofline check of a measured rate."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum


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
    # What the scheduler admits at once, and how many streams at max_model_len still each
    # decode at `slo_tps` (roofline.users_at_rate): with max_concurrency, the three bounds
    # of the capacity story (sparkdomain/capacity.py).
    max_num_seqs: int = 1
    slo_tps: float = 0.0
    users_at_slo_rate: int | None = None
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
