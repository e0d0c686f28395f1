"""Several models on one Spark (co-location): when a run may start beside the runs a host
already serves. docs/runs.md, "Several models on one Spark".

A host takes `Host.max_runs` models side by side (1 by default: one model at a time). A
second one is admitted only when

- the host allows it and has a free place (`max_runs`), and neither the new recipe nor a
  run there is a pair run (tensor parallel over two Sparks holds both of them alone);
- no other run there is still starting: vLLM's start gate and its memory profiling read
  the free memory of the whole machine at start-up, and two starts at once would each
  count the other's half-allocated pool (vLLM: "Error in memory profiling … other
  processes sharing the same container release GPU memory while vLLM is profiling");
- the ≤ 0.90 rule holds over the total: the utilizations of every active run there (a run
  that is stopping still holds its pool) plus the new one's sum to at most 0.90 — each
  vLLM takes its own `utilization × total` whatever the others hold (vLLM's
  `gpu_memory_utilization` is per instance);
- no app above objects (``colocation_conflicts``, apps/runs/signals.py: the gateway's
  catalog keeps an exclusive group's models apart);

and then, like any start, the host's measured MemAvailable must hold the new pool plus the
freeze margin (apps/runs/services.py `_memory_refusal`: vLLM's gate, which with the other
runs loaded sees their memory as used).

Each active run holds a slot of its host (0 … max_runs - 1, `Run.slot`), and the database
allows one active run a slot: two admissions racing for a host pick the same smallest free
slot and one of them is refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

from apps.core.hooks import gathered
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import STARTING_STATES, Run
from apps.runs.signals import colocation_conflicts
from sparkdomain import spark
from sparkdomain.command import utilization_text
from sparkdomain.pair import needs_pair


def runs_on(host: Host) -> list[Run]:
    """Every active run that uses the host, oldest first (its own and the pair runs it is
    the worker side of)."""
    return list(
        Run.objects.active().on(host).select_related("recipe", "host", "pinned_by")
        .order_by("created_at", "pk")
    )  # fmt: skip


def total_utilization(runs: Iterable[Run]) -> Decimal:
    return sum((Decimal(r.recipe.gpu_memory_utilization) for r in runs), Decimal("0"))


def free_slot(host: Host, runs: Iterable[Run]) -> int:
    """The smallest slot no active run of the host holds (0 when it runs nothing)."""
    taken = {r.slot for r in runs if r.host_id == host.pk}
    return next(slot for slot in range(len(taken) + 1) if slot not in taken)


def refusal(host: Host, recipe: Recipe, runs: list[Run]) -> str | None:
    """Why a run of `recipe` may not start beside `runs` (the host's active runs, none of
    them of this recipe's that a caller reuses); None when it may. Memory as measured is
    the start's own rule (vLLM's gate), checked after this."""
    if not runs:
        return None
    first = runs[0]
    state = first.get_state_display().lower()
    if host.max_runs <= 1:
        return (f"{host.name} already runs “{first.recipe}” ({state}): stop it first — one "
                "model at a time on this Spark (an admin can let it run several side by "
                "side: Hosts → models at once).")  # fmt: skip
    if needs_pair(recipe.world_size):
        return (f"{host.name} already runs “{first.recipe}” ({state}): a tensor-parallel-2 "
                "recipe needs both Sparks of its pair to itself.")  # fmt: skip
    pair = next((r for r in runs if r.is_pair), None)
    if pair is not None:
        return (f"{host.name} serves its half of pair run {pair.pk} (“{pair.recipe}”): a pair "
                "run holds both its Sparks alone.")  # fmt: skip
    if len(runs) >= host.max_runs:
        names = ", ".join(f"“{r.recipe}”" for r in runs)
        return (f"{host.name} already runs {len(runs)} models ({names}), the most it takes "
                f"side by side ({host.max_runs}): stop one first.")  # fmt: skip
    starting = next((r for r in runs if r.state in STARTING_STATES), None)
    if starting is not None:
        return (f"{host.name} is starting “{starting.recipe}” "
                f"({starting.get_state_display().lower()}): a second model starts there once it "
                "is ready — vLLM measures the Spark's free memory as it starts, and two starts "
                "at once would each misread the other's pool.")  # fmt: skip
    held = total_utilization(runs)
    total = held + Decimal(recipe.gpu_memory_utilization)
    if total > spark.MAX_GPU_MEMORY_UTILIZATION:
        parts = " + ".join(f"{utilization_text(r.recipe.gpu_memory_utilization)} "
                           f"(“{r.recipe}”)" for r in runs)  # fmt: skip
        room = spark.MAX_GPU_MEMORY_UTILIZATION - held
        return (f"{host.name}'s runs hold {parts} of its memory; with this recipe's "
                f"{recipe.utilization_text} the total would be {utilization_text(total)}, over "
                f"the {spark.MAX_GPU_MEMORY_UTILIZATION} every Spark keeps to. Room left: "
                f"{utilization_text(max(room, Decimal('0')))}.")  # fmt: skip
    conflicts = gathered(colocation_conflicts, sender=Run, host=host, recipe=recipe, runs=runs)
    if conflicts:
        return conflicts[0]
    return None
