"""Which run the memory watchdog stops when several share a Spark (co-location: a host's
`max_runs`). Pure Python, no Django: the host agent (apps/guard/agent.py) describes each
active run as a `Candidate` and stops the one `choose` names — one run per decision; the
next poll decides again if memory is still short.

The order (docs/guard.md, "Several runs on one Spark"):

1. **Protected last.** A pinned run (an operator protects it) and a run a benchmark job is
   measuring or preparing right now are stopped only when every run is protected — then
   the newest one anyway: a Spark that freezes loses them all.
2. **A run with a server first.** A run that has none yet (queued, pulling, downloading)
   holds no memory worth freeing: stopping it would not help.
3. **The lowest on-demand priority first** (the catalog's priority for the run's recipe;
   a recipe without a catalog entry counts as 0) — and at the same priority a run started
   on demand before an operator's own start.
4. **The one idle longest** (seconds since it last served a request).
5. **The newest.**

`Choice.why` says in a few words why it was that one ("lowest priority (-5; run 7: 0)",
"idle 14 min (run 7: 2 min)", …): the action text, the audit row, the incident and the
banner carry it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Candidate", "Choice", "choose", "idle_words"]


@dataclass(frozen=True)
class Candidate:
    """One active run of the host, as the choice sees it.

    created: when it was created (any increasing number: a timestamp); the newest has the
    largest. idle_s: seconds since it last served a request (None: unknown). jobs: the
    benchmark jobs using it now (their ids)."""

    run_id: int
    created: float
    pinned: bool = False
    jobs: tuple[int, ...] = ()
    priority: int = 0
    on_demand: bool = False
    idle_s: float | None = None
    has_server: bool = True

    @property
    def protected(self) -> bool:
        return self.pinned or bool(self.jobs)

    def protection(self) -> str:
        """Why it is protected ("pinned", "in use by benchmark job 3"), or ""."""
        reasons = []
        if self.pinned:
            reasons.append("pinned")
        if self.jobs:
            ids = ", ".join(str(j) for j in self.jobs)
            reasons.append(f"in use by benchmark job{'s' if len(self.jobs) > 1 else ''} {ids}")
        return " and ".join(reasons)


@dataclass(frozen=True)
class Choice:
    victim: Candidate
    why: str  # a few words: why this one ("" when it was the host's only run)
    protected: bool = False  # every run was protected: the newest was stopped anyway
    ranking: list[int] = field(default_factory=list)  # every run id, first to stop first


def idle_words(seconds: float) -> str:
    """14 min, 45 s, 2.5 h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _idle(c: Candidate) -> int:
    # Whole seconds: two runs that never served a request differ by the time between
    # reading one and the other, not by how long they have been idle.
    return round(c.idle_s) if c.idle_s is not None else 0


def _key(c: Candidate) -> tuple:
    return (
        c.protected,
        not c.has_server,
        c.priority,
        not c.on_demand,  # an operator's own start after on-demand runs of its priority
        -_idle(c),
        -c.created,
        -c.run_id,
    )


def choose(candidates: Sequence[Candidate]) -> Choice | None:
    """The run to stop among the host's active runs (None when there is none)."""
    if not candidates:
        return None
    ranked = sorted(candidates, key=_key)
    ranking = [c.run_id for c in ranked]
    if len(ranked) == 1:
        return Choice(ranked[0], "", ranking=ranking)
    if all(c.protected for c in ranked):
        # The newest (one with a server first: stopping a queued run frees nothing).
        newest = sorted(ranked, key=lambda c: (not c.has_server, -c.created, -c.run_id))[0]
        oldest_first = sorted(ranked, key=lambda c: (c.created, c.run_id))
        others = "; ".join(f"run {c.run_id} {c.protection()}" for c in oldest_first)
        why = (f"every run here is protected ({others}): the newest stopped anyway, since a "
               "Spark that freezes loses them all")  # fmt: skip
        ranking = [newest.run_id, *(r for r in ranking if r != newest.run_id)]
        return Choice(newest, why, protected=True, ranking=ranking)
    victim, runner_up = ranked[0], ranked[1]
    spared = "; ".join(f"run {c.run_id} is {c.protection()}" for c in ranked if c.protected)
    if runner_up.protected:
        why = f"the only run not protected ({spared})"
    else:
        why = _why(victim, runner_up) + (f" ({spared})" if spared else "")
    return Choice(victim, why, ranking=ranking)


def _why(victim: Candidate, other: Candidate) -> str:
    """The first rule that put `victim` before `other` (both unprotected)."""
    theirs = f"run {other.run_id}"
    if victim.has_server != other.has_server:
        return f"{theirs} has no server yet"
    if victim.priority != other.priority:
        return f"lowest priority ({victim.priority}; {theirs}: {other.priority})"
    if victim.on_demand != other.on_demand:
        return (f"started on demand ({theirs} by an operator; both priority "
                f"{victim.priority})")  # fmt: skip
    if _idle(victim) != _idle(other):
        mine, their_idle = victim.idle_s or 0.0, other.idle_s or 0.0
        return f"idle {idle_words(mine)} ({theirs}: {idle_words(their_idle)})"
    if victim.created != other.created:
        return f"the newest (after {theirs})"
    return f"the higher run id (after {theirs})"
