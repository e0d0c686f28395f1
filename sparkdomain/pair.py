"""Two Sparks as one: a model served with tensor parallelism 2 over a pair of Sparks joined
by their ConnectX link (docs/two-sparks.md).

The rules a pair run follows, and the arithmetic of what it costs, shared by the planner
(per-Spark memory, the decode ceiling), admission and sparksim (which times a pair's steps
with the same functions):

- a Spark has one GPU, a pair two: tensor parallel 1 runs on one Spark, 2 on a pair, more
  on nothing SparkPanel drives;
- each Spark holds half the weights and half of every sequence's KV cache (vLLM shards
  attention heads and expert weights over the ranks), within its own reserves and its own
  measured free memory — so a pair is planned as two one-Spark plans, one per side;
- a decode step reads each Spark's half of the active weights in parallel, then pays the
  tensor-parallel all-reduces over the link: two per layer (after attention or the mixer,
  and after the MLP or the experts), each a latency plus the activations' bytes.

The link's arithmetic (and its assumed figures) is `sparkdomain/planner/link.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkdomain.planner import Architecture, Flags, HostSpec, Plan, Verdict, plan
from sparkdomain.planner.link import step_comm_seconds

PAIR_SIZE = 2  # GPUs in a pair of Sparks (one each)

# The flag vLLM needs to spread ranks over nodes: with one GPU per Spark, TP 2 without it
# is refused ("World size (2) is larger than the number of available GPUs (1) in this node").
RAY_BACKEND_FLAG = "--distributed-executor-backend"


def tensor_parallel_problem(tp: int, pp: int = 1, dp: int = 1) -> str | None:
    """Why SparkPanel cannot serve this parallelism at all (None when it can: one GPU on a
    Spark, two on a pair). vLLM needs tensor × pipeline × data parallel GPUs."""
    world = tp * pp * dp
    if world in (1, PAIR_SIZE):
        return None
    spelled = " × ".join(
        f"--{name}-parallel-size {n}"
        for name, n in (("tensor", tp), ("pipeline", pp), ("data", dp))
        if n > 1 or name == "tensor"
    )
    sparks = f"{world} Sparks" if world > 1 else "a Spark"
    return (
        f"{spelled} needs {world} GPUs ({sparks}): a Spark has one and a pair of Sparks two, "
        f"and SparkPanel drives one Spark or a pair; use 1 (one Spark) or {PAIR_SIZE} (a pair)"
    )


def needs_pair(tp: int | None) -> bool:
    return (tp or 1) == PAIR_SIZE


@dataclass(frozen=True)
class Side:
    """One Spark of a pair as the planner sees it: its name, its role and its spec."""

    name: str
    role: str  # "head" (the Ray head and the API server) or "worker"
    spec: HostSpec


@dataclass(frozen=True)
class PairPlan:
    """A TP-2 recipe on a pair: one plan per Spark (each holds half the weights and half
    the KV cache, within its own reserves) and the pair's verdict, the worse side's."""

    sides: tuple[Side, Side]
    plans: tuple[Plan, Plan]
    decode_comm_seconds: float  # the all-reduces of one single-stream decode step

    @property
    def verdict(self) -> Verdict:
        order = [Verdict.DOES_NOT_FIT, Verdict.UNKNOWN, Verdict.TIGHT, Verdict.FITS]
        return min((p.verdict for p in self.plans), key=order.index)

    def worst(self) -> tuple[Side, Plan]:
        """The side that decides the verdict (the head when both are alike)."""
        index = next(i for i, p in enumerate(self.plans) if p.verdict is self.verdict)
        return self.sides[index], self.plans[index]


def plan_pair(arch: Architecture, flags: Flags, head: Side, worker: Side) -> PairPlan:
    """Plan a TP-2 recipe on a pair: each side's own plan with its own spec."""
    if not needs_pair(flags.tensor_parallel_size):
        raise ValueError("a pair serves tensor parallel 2 only")
    plans = (plan(arch, flags, head.spec), plan(arch, flags, worker.spec))
    return PairPlan((head, worker), plans, step_comm_seconds(arch, 1))
