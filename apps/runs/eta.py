"""How long until a starting run is ready: the rest of its current phase and the phases
still to come.

Only pulling, downloading and loading weights report a real percentage; after the weights
vLLM spends minutes in torch.compile, CUDA-graph capture and the warm-up before it answers,
and says nothing about how far it is. Those phases are measured instead: every run keeps
how long each of its phases took (`Run.timings`, `Run.phase_seconds()` in the host's
time), so earlier starts of the same recipe on the same Spark that reached ready say how
long the phases to come take there (the median of the last few: one odd start — a cold
page cache, a first compile — does not set the estimate). A start with no such history
says so instead of guessing. Every figure here is in wall seconds (what a person waits):
a simulated host's phases are converted with the run's own clock (apps/hosts/clock.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from statistics import median

from django.utils import timezone

from apps.hosts.clock import run_clock
from apps.runs.models import STARTING_STATES, Run, RunState

S = RunState
# The phases the model server goes through once started, in order (a start may skip
# loading or compiling: a reused cache, --enforce-eager; the history says which it took).
SERVER_PHASES = (S.STARTING, S.LOADING, S.COMPILING, S.WARMING)
# The phases in words, as the run page's estimate names them.
PHASE_WORDS = {
    S.QUEUED: "queued", S.PULLING: "image pull", S.DOWNLOADING: "download", S.STARTING: "start",
    S.LOADING: "weights", S.COMPILING: "compile", S.WARMING: "warm-up",
}  # fmt: skip
HISTORY_RUNS = 5  # the earlier ready starts whose median sets the phases to come
# Below this a percentage's pace says nothing yet (the first shard, a pull's first layer).
MIN_PERCENT = 3
UNKNOWN_LATER = "unknown on the first start"


@dataclass(frozen=True)
class ReadyEstimate:
    """Where a starting run stands on its way to ready, in wall seconds."""

    phase: str
    phase_left: float | None  # the rest of the current phase (None: no basis)
    later: tuple[str, ...]  # the phases still to come, in order
    later_s: float | None  # how long they take together (None: no earlier ready start)
    starts: int  # the earlier ready starts the figures come from
    overdue: bool = False  # the current phase already took longer than it did before

    @property
    def seconds(self) -> float | None:
        """Seconds to ready; None unless every part has a basis."""
        if self.phase_left is None or self.later_s is None:
            return None
        return self.phase_left + self.later_s

    @property
    def words(self) -> str:
        """E.g. "weights ~2 min, then compile and warm-up ~3 min: ready in ~5 min", or
        "weights ~2 min, then compile and warm-up (unknown on the first start)"."""
        text = PHASE_WORDS.get(self.phase, self.phase)
        if self.phase_left is not None:
            text += f" ~{approx(self.phase_left)}"
        elif self.overdue:
            text += " (longer than before)"
        elif not self.later and not self.starts:
            text += f" ({UNKNOWN_LATER})"
        if not self.later:
            return f"{text}, then ready"
        text += f", then {_join([PHASE_WORDS[p] for p in self.later])}"
        if self.later_s is None:
            return f"{text} ({UNKNOWN_LATER})"
        text += f" ~{approx(self.later_s)}"
        total = self.seconds
        return f"{text}: ready in ~{approx(total)}" if total is not None else text

    @property
    def basis(self) -> str:
        """Where the phases to come come from (a tooltip)."""
        if not self.starts:
            return "No earlier start of this recipe on this Spark reached ready: nothing to go by."
        if self.starts == 1:
            return "As the last ready start of this recipe on this Spark."
        return f"The median of the last {self.starts} ready starts of this recipe on this Spark."


def approx(seconds: float) -> str:
    """A duration as people say it when it is an estimate: "40 s", "3 min", "1 h 05 min"."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{max(5, round(seconds / 5) * 5)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _spent(run: Run) -> float | None:
    """Wall seconds in the current phase so far."""
    span = run.timings.get(run.state)
    if not span:
        return None
    return max(0.0, (timezone.now() - datetime.fromisoformat(span["start"])).total_seconds())


def _measured_left(run: Run) -> float | None:
    """The rest of the current phase from its own progress: a download's ETA (its rate over
    the last seconds), or the pace of a real percentage so far."""
    if run.state == S.DOWNLOADING:
        eta = (run.facts.get("download") or {}).get("eta_s")
        return float(eta) if isinstance(eta, int | float) else None
    if run.state not in (S.PULLING, S.LOADING) or not MIN_PERCENT <= run.percent < 100:
        return None
    spent = _spent(run)
    return None if spent is None else spent * (100 - run.percent) / run.percent


def history(run: Run) -> tuple[dict[str, float], int]:
    """The server's phases in host seconds (the median of each over the last ready starts
    of the same recipe on the same host, a pair on the same pair), and how many starts."""
    earlier = (
        Run.objects.filter(recipe_id=run.recipe_id, host_id=run.host_id,
                           peer_host_id=run.peer_host_id, timings__has_key=S.READY)
        .exclude(pk=run.pk).order_by("-created_at", "-pk")[:HISTORY_RUNS]
    )  # fmt: skip
    measured = [r.phase_seconds() for r in earlier]
    if not measured:
        return {}, 0
    # A phase a start skipped took no time in it.
    return {p: median([m.get(p, 0.0) for m in measured]) for p in SERVER_PHASES}, len(measured)


def ready_estimate(run: Run) -> ReadyEstimate | None:
    """The way to ready of a run that is starting; None once it is ready (or over)."""
    if run.state not in STARTING_STATES:
        return None
    phases, starts = history(run)
    clock = run_clock(run)
    # The phases to come: the server's phases after the current one (all of them before
    # the server starts). With a history, those its starts went through.
    after = SERVER_PHASES
    if run.state in SERVER_PHASES:
        after = SERVER_PHASES[SERVER_PHASES.index(run.state) + 1 :]
    if phases:
        later = tuple(p for p in after if phases[p] > 0)
        later_s = sum(clock.wall_seconds(phases[p]) for p in later)
    else:  # nothing to come (warming) takes no time; anything else has no basis
        later, later_s = after, (None if after else 0.0)
    left, overdue = _measured_left(run), False
    if left is None and run.state in phases:
        # No progress of its own: how long this phase took before, less what it spent.
        spent = _spent(run)
        if spent is not None:
            left = clock.wall_seconds(phases[run.state]) - spent
            if left < 0:
                left, overdue = None, True
    return ReadyEstimate(run.state, left, later, later_s, starts, overdue)
