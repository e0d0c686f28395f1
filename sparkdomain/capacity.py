"""How many teammates a recipe serves: one answer from three bounds (docs/recipes.md,
"How many users").

- **memory**: how many sequences at max_model_len the KV cache holds — planned by the
  planner, measured by vLLM at a ready start ("Maximum concurrency for N tokens per
  request");
- **scheduler**: ``--max-num-seqs``, the most sequences vLLM runs at once;
- **latency**: how many concurrent users still meet the SLO (TTFT p95 and a per-user
  decode rate) — measured by a benchmark's concurrency sweep, else estimated from the
  bandwidth (planner/roofline.py::users_at_rate; decode rate only).

The smallest binds. The pages used to give three answers on three pages ("608 users at
full context", "1,068× max concurrency", "serves 2 users"); this module says which one a
user should plan by and why, in one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The benchmark suites' default SLO (apps/benchmarks/models.py::Suite): TTFT p95 at most
# 2 s and 0.1 s per output token (10 tok/s per user, about reading speed).
DEFAULT_SLO_TTFT_S = 2.0
DEFAULT_SLO_TPOT_S = 0.1
DEFAULT_SLO_TPS = 1 / DEFAULT_SLO_TPOT_S

MEMORY, SCHEDULER, LATENCY = "memory", "scheduler", "latency"
LABELS = {MEMORY: "Memory (KV cache)", SCHEDULER: "Scheduler", LATENCY: "Latency (SLO)"}


@dataclass(frozen=True)
class MeasuredLatency:
    """A benchmark's capacity answer: `users` concurrent users met the SLO, the sweep
    tested up to `tested_up_to`; `client_limited`: the deciding level's load generator
    lagged ("client lag" / "busy machine"), so the server may serve more."""

    users: int
    slo_ttft_s: float
    slo_tps: float
    tested_up_to: int
    source: str  # "job 7 on spark-1, Dec 3"
    client_limited: str = ""  # the flag's word, empty when the client kept up
    stale: bool = False  # the recipe changed after the job measured it


@dataclass(frozen=True)
class Bound:
    kind: str  # MEMORY, SCHEDULER or LATENCY
    users: int | None  # None: unknown
    measured: bool
    text: str  # the row's words: what the number is and where it comes from
    at_least: bool = False  # a latency answer at the sweep's top level: the bound is higher

    @property
    def label(self) -> str:
        return LABELS[self.kind]


@dataclass(frozen=True)
class CapacityStory:
    bounds: list[Bound]
    binding: Bound | None
    headline: str
    notes: list[str] = field(default_factory=list)

    @property
    def users(self) -> int | None:
        return self.binding.users if self.binding else None


def _n(value: int) -> str:
    return f"{value:,}"


def _users(value: int) -> str:
    return f"{_n(value)} user" + ("" if value == 1 else "s")


def capacity_story(
    *,
    max_num_seqs: int,
    memory_planned: int | None,
    memory_measured: float | None = None,
    memory_source: str = "",
    latency_predicted: int | None = None,
    predicted_slo_tps: float = DEFAULT_SLO_TPS,
    latency_measured: MeasuredLatency | None = None,
) -> CapacityStory:
    """The three bounds, which one binds, and the sentence a user plans by. A measured
    figure stands in for its estimate; a latency answer at the top of its sweep is a lower
    bound ("at least"), so it binds only below the others."""
    memory = _memory_bound(memory_planned, memory_measured, memory_source)
    scheduler = Bound(
        SCHEDULER,
        max_num_seqs,
        True,
        f"--max-num-seqs {_n(max_num_seqs)}: vLLM runs at most this many sequences at once.",
    )
    latency = _latency_bound(latency_predicted, predicted_slo_tps, latency_measured)
    bounds = [memory, scheduler, latency]
    known = [b for b in bounds if b.users is not None]
    binding = min(known, key=lambda b: (b.users, b.at_least), default=None)
    notes = []
    if memory.users is not None:
        notes.append(
            "Memory counts sequences at the full context: users whose conversations are "
            "shorter share the KV cache by tokens, so more of them fit."
        )
    if latency_measured and latency_measured.client_limited:
        notes.append(
            f"The benchmark's deciding level was flagged “{latency_measured.client_limited}”: "
            "the load generator, not the server, may have been the bottleneck, so the server "
            "may serve more; rerun it from a machine with idle cores to know."
        )
    if latency_measured and latency_measured.stale:
        notes.append(
            "The recipe changed after that benchmark: its latency answer may no longer hold."
        )
    if latency_measured is None and latency.users is not None:
        notes.append(
            "The latency figure is an estimate of the decode rate alone (the GB10's measured "
            "share of its bandwidth); TTFT and prefill are only measured: queue a benchmark."
        )
    slo = (
        f"TTFT p95 ≤ {latency_measured.slo_ttft_s:g} s and ≥ {latency_measured.slo_tps:g} "
        "tok/s each"
        if latency_measured
        else f"≥ {predicted_slo_tps:g} tok/s each"
    )
    return CapacityStory(bounds, binding, _headline(binding, bounds, slo), notes)


def _memory_bound(planned: int | None, measured: float | None, source: str) -> Bound:
    if measured is not None:
        users = int(measured)  # vLLM's figure is unfloored (1,068.5×): whole sequences
        planned_words = f" (planned {_n(planned)})" if planned is not None else ""
        where = f", {source}" if source else ""
        return Bound(
            MEMORY,
            users,
            True,
            f"The KV cache holds {_n(users)} sequences at full context, as vLLM measured at a "
            f"ready start{where}{planned_words}.",
        )
    if planned is None:
        return Bound(MEMORY, None, False, "Unknown until the planner knows the KV size.")
    return Bound(
        MEMORY,
        planned,
        False,
        f"The KV cache holds {_n(planned)} sequences at full context, as planned "
        "(no ready start has measured it yet).",
    )


def _latency_bound(
    predicted: int | None, slo_tps: float, measured: MeasuredLatency | None
) -> Bound:
    if measured is not None:
        at_least = measured.users > 0 and measured.users >= measured.tested_up_to
        slo = f"TTFT p95 ≤ {measured.slo_ttft_s:g} s and ≥ {measured.slo_tps:g} tok/s each"
        if measured.users == 0:
            text = f"No measured level met {slo} ({measured.source})."
        else:
            more = " — every level tested met it, so it may serve more" if at_least else ""
            text = f"{_users(measured.users)} met {slo} ({measured.source}){more}."
        return Bound(LATENCY, measured.users, True, text, at_least)
    if predicted is None:
        return Bound(LATENCY, None, False, "Unknown: needs the active parameters and the KV size.")
    if predicted == 0:
        text = f"Even one user decodes below {slo_tps:g} tok/s at full context (estimate)."
    else:
        text = (
            f"About {_users(predicted)} at full context each decode at ≥ {slo_tps:g} tok/s "
            "(estimate from the bandwidth; not measured)."
        )
    return Bound(LATENCY, predicted, False, text)


def _beside(bound: Bound) -> str:
    """A bound that does not bind, in a few words for the headline's parenthesis."""
    if bound.kind == MEMORY:
        return f"memory holds {_n(bound.users)} at full context"
    if bound.kind == SCHEDULER:
        return f"--max-num-seqs admits {_n(bound.users)}"
    qualifier = "at least " if bound.at_least else "" if bound.measured else "about "
    return f"latency allows {qualifier}{_n(bound.users)}"


def _headline(binding: Bound | None, bounds: list[Bound], slo: str) -> str:
    if binding is None:
        return "Capacity unknown: the planner needs the model's architecture."
    others = [b for b in bounds if b is not binding and b.users is not None]
    beside = "; ".join(_beside(b) for b in others)
    tail = f". {beside[0].upper()}{beside[1:]}." if beside else "."
    if binding.kind == LATENCY:
        if binding.at_least:
            return (
                f"At least {_users(binding.users)}: every level the benchmark tested met "
                f"{slo}{tail}"
            )
        verb = "is" if binding.measured else "will be"
        if binding.users == 0:
            return f"The latency SLO, not memory, {verb} the limit: no user gets {slo}{tail}"
        how = "measured" if binding.measured else "estimated"
        return (
            f"The latency SLO, not memory, {verb} the limit: {_users(binding.users)} "
            f"with {slo}, {how}{tail}"
        )
    if binding.kind == SCHEDULER:
        return f"--max-num-seqs is the limit: {_users(binding.users)} at once{tail}"
    how = "measured" if binding.measured else "planned"
    return f"Memory is the limit: {_users(binding.users)} at full context, {how}{tail}"
