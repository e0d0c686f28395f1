"""Plan against measured: what vLLM reported at a start beside what the planner predicted
for that recipe on that host, and the correction those differences give the next plan for
the same image on the same host.

Pure Python, no Django (apps/runs/calibration.py stores the checks and picks which apply).
The four numbers vLLM's start-up log gives (the log follower's facts):

- kv_cache_gib: `Available KV cache memory: 40.12 GiB` — kv_available_bytes ÷ 2**30;
- kv_cache_tokens: `GPU KV cache size: 123,456 tokens` — tokens_that_fit;
- max_concurrency: `Maximum concurrency for 8,192 tokens per request: 3.70x` — KV available
  ÷ one sequence, unfloored (vLLM prints a fraction; the plan's `max_concurrency` floors it);
- model_memory_gib: `Model loading took 20.3 GiB memory` — weights_bytes ÷ 2**30.

A ratio is measured ÷ predicted. A correction is the median ratio of the latest starts
(`WINDOW`): robust to one odd start, and it follows an image whose behaviour changed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sparkdomain.planner.results import Plan, Verdict
from sparkdomain.planner.verdict import kv_verdict
from sparkdomain.spark import GIB

KV_CACHE_GIB = "kv_cache_gib"
KV_CACHE_TOKENS = "kv_cache_tokens"
MAX_CONCURRENCY = "max_concurrency"
MODEL_MEMORY_GIB = "model_memory_gib"
QUANTITIES: tuple[str, ...] = (KV_CACHE_GIB, KV_CACHE_TOKENS, MAX_CONCURRENCY, MODEL_MEMORY_GIB)
LABELS = {
    KV_CACHE_GIB: "KV cache memory",
    KV_CACHE_TOKENS: "KV cache tokens",
    MAX_CONCURRENCY: "Maximum concurrency",
    MODEL_MEMORY_GIB: "Model memory",
}
# What the headline of a correction calls each quantity ("0.93× the planned KV cache").
NOUNS = {
    KV_CACHE_GIB: "KV cache",
    KV_CACHE_TOKENS: "KV cache tokens",
    MAX_CONCURRENCY: "concurrency",
    MODEL_MEMORY_GIB: "model memory",
}
# Token and concurrency figures scale with the KV bytes; where vLLM printed only the bytes
# (older versions count blocks, not tokens), the bytes' ratio corrects them.
FALLBACK = {KV_CACHE_TOKENS: KV_CACHE_GIB, MAX_CONCURRENCY: KV_CACHE_GIB}
WINDOW = 10


@dataclass(frozen=True)
class Check:
    """One quantity: what the plan predicted, what vLLM measured."""

    quantity: str
    predicted: float | None
    measured: float | None

    @property
    def label(self) -> str:
        return LABELS[self.quantity]

    @property
    def ratio(self) -> float | None:
        if self.predicted is None or self.measured is None or self.predicted <= 0:
            return None
        return self.measured / self.predicted

    @property
    def predicted_text(self) -> str:
        return format_value(self.quantity, self.predicted)

    @property
    def measured_text(self) -> str:
        return format_value(self.quantity, self.measured)

    @property
    def ratio_text(self) -> str:
        ratio = self.ratio
        return "—" if ratio is None else f"{ratio:.2f}×"


def format_value(quantity: str, value: float | None) -> str:
    """A quantity as the pages show it (GiB, tokens, sequences at max_model_len)."""
    if value is None:
        return "—"
    if quantity in (KV_CACHE_GIB, MODEL_MEMORY_GIB):
        return f"{value:,.2f} GiB"
    if quantity == KV_CACHE_TOKENS:
        return f"{value:,.0f}"
    return f"{value:,.2f}×"


def predicted(plan: Plan) -> dict[str, float | None]:
    """The plan's numbers in vLLM's units (GiB, tokens, sequences at max_model_len)."""
    kv = plan.kv_available_bytes
    per_seq = plan.kv_bytes_per_sequence
    sequence = None if per_seq is None else per_seq + plan.state_bytes_per_sequence
    return {
        KV_CACHE_GIB: None if kv is None else kv / GIB,
        KV_CACHE_TOKENS: None if plan.tokens_that_fit is None else float(plan.tokens_that_fit),
        MAX_CONCURRENCY: None if kv is None or not sequence else max(kv, 0.0) / sequence,
        MODEL_MEMORY_GIB: None if plan.weights_bytes is None else plan.weights_bytes / GIB,
    }


def measured(facts: Mapping[str, object]) -> dict[str, float | None]:
    """vLLM's numbers from the log follower's facts (absent ones are None)."""
    out: dict[str, float | None] = {}
    for quantity in QUANTITIES:
        value = facts.get(quantity)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        out[quantity] = float(value) if ok and math.isfinite(value) else None
    return out


def compare(plan: Plan, facts: Mapping[str, object]) -> list[Check]:
    want, got = predicted(plan), measured(facts)
    return [Check(q, want[q], got[q]) for q in QUANTITIES]


@dataclass(frozen=True)
class Correction:
    """What the latest starts measured for one quantity, as a share of the plan."""

    quantity: str
    ratio: float  # the median
    low: float
    high: float
    starts: int


def correction(quantity: str, ratios: Sequence[float]) -> Correction | None:
    """The correction from ratios given newest first (only the latest `WINDOW` count)."""
    latest = [r for r in ratios if math.isfinite(r) and r >= 0][:WINDOW]
    if not latest:
        return None
    return Correction(
        quantity, statistics.median(latest), min(latest), max(latest), starts=len(latest)
    )


@dataclass(frozen=True)
class CorrectedPlan:
    planned: dict[str, float | None]
    corrected: dict[str, float | None]
    corrections: dict[str, Correction]
    planned_verdict: Verdict
    verdict: Verdict  # the plan's verdict with the corrected KV cache
    kv_needed_gib: float | None
    kv_usage_percent: float | None  # KV needed ÷ corrected KV cache

    @property
    def headline(self) -> Correction | None:
        return next((self.corrections[q] for q in QUANTITIES if q in self.corrections), None)

    @property
    def starts(self) -> int:
        return max((c.starts for c in self.corrections.values()), default=0)


def corrected(plan: Plan, corrections: Mapping[str, Correction]) -> CorrectedPlan:
    """The plan's numbers times what vLLM measured on earlier starts of the same image on
    the same host, and the verdict the corrected KV cache gives."""
    planned = predicted(plan)
    out: dict[str, float | None] = {}
    for quantity in QUANTITIES:
        found = corrections.get(quantity) or corrections.get(FALLBACK.get(quantity, ""))
        value = planned[quantity]
        out[quantity] = None if value is None or found is None else value * found.ratio
    verdict = plan.verdict
    needed = plan.kv_needed_bytes
    usage = None
    available = out[KV_CACHE_GIB]
    frozen = any(w.code == "freeze-risk" for w in plan.warnings)  # memory, not KV: unchanged
    if available is not None and needed is not None and not frozen:
        available_bytes = available * GIB
        verdict = kv_verdict(available_bytes, needed)
        usage = needed / available_bytes * 100 if available_bytes > 0 else None
    return CorrectedPlan(
        planned=planned,
        corrected=out,
        corrections=dict(corrections),
        planned_verdict=plan.verdict,
        verdict=verdict,
        kv_needed_gib=None if needed is None else needed / GIB,
        kv_usage_percent=usage,
    )


def describe(result: CorrectedPlan, *, host: str, image: str, scope: str = "") -> str:
    """One sentence: "On spark-1 with vllm/vllm-openai:nightly, vLLM measured 0.93× the
    planned KV cache over 3 starts: corrected KV cache ≈ 37.2 GiB, tokens ≈ 123,400 (planned
    40.0 GiB, 132,700)." `scope` qualifies the starts ("of this recipe")."""
    head = result.headline
    if head is None:
        return ""
    starts = f"{head.starts} start" + ("s" if head.starts != 1 else "")
    starts += f" {scope}" if scope else ""
    spread = ""
    if head.starts > 1 and head.high > head.low:
        spread = f" (from {head.low:.2f}× to {head.high:.2f}×)"
    text = (
        f"On {host} with {image}, vLLM measured {head.ratio:.2f}× the planned "
        f"{NOUNS[head.quantity]} over {starts}{spread}"
    )
    parts, was = [], []
    for quantity, unit in ((KV_CACHE_GIB, "GiB"), (KV_CACHE_TOKENS, "tokens")):
        value, plan_value = result.corrected[quantity], result.planned[quantity]
        if value is None or plan_value is None:
            continue
        if unit == "GiB":
            parts.append(f"KV cache ≈ {value:,.1f} GiB")
            was.append(f"{plan_value:,.1f} GiB")
        else:
            parts.append(f"tokens ≈ {value:,.0f}")
            was.append(f"{plan_value:,.0f}")
    if not parts:
        value = result.corrected[head.quantity]
        if value is None:
            return text + "."
        return text + f": corrected {NOUNS[head.quantity]} ≈ {value:,.2f}."
    return text + f": corrected {', '.join(parts)} (planned {', '.join(was)})."
