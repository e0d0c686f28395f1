"""One clock: every figure shown for a host is in that host's time.

A real Spark's clock is the wall clock. A simulated one (sparksim with ``--time-scale N``)
runs N times faster than the wall clock: one wall second is N seconds on the simulated
Spark, and a token rate measured against the wall clock is N times what a real Spark would
do. The panel shows what a real Spark would do, so every duration measured on the wall
clock is multiplied by N and every rate per wall second divided by N — here, in one place
(the chat's TTFT and tok/s, the host agent's token rates, a run's phase timings and warm-up
requests, the benchmark harness's scale). Figures a simulated server reports itself
(sparksim's ``/metrics`` histograms, its log lines) already count simulated seconds and are
never rescaled. Pages label such figures "simulated ×N" (the ``sim_label`` filter).

A run records the speed its server started with (``Run.facts[SCALE_FACT]``): changing a
host's speed later does not rewrite that run's history, and its figures keep the clock they
were measured on. Pure Python apart from the lookups on model instances.
"""

from __future__ import annotations

from dataclasses import dataclass

# The key in Run.facts: the server's time scale at its start (None on a real host).
SCALE_FACT = "sim_time_scale"


@dataclass(frozen=True)
class HostClock:
    """A host's clock: ``scale`` host seconds pass per wall second (1 on a real Spark)."""

    scale: float = 1.0
    simulated: bool = False

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"a time scale must be positive, not {self.scale!r}")

    def host_seconds(self, wall_seconds: float | None) -> float | None:
        """A duration measured on the wall clock, in host seconds."""
        return None if wall_seconds is None else wall_seconds * self.scale

    def wall_seconds(self, host_seconds: float | None) -> float | None:
        """How long ``host_seconds`` on the host take on the wall clock."""
        return None if host_seconds is None else host_seconds / self.scale

    def host_rate(self, per_wall_second: float | None) -> float | None:
        """A rate per wall second (tokens/s), per host second."""
        return None if per_wall_second is None else per_wall_second / self.scale

    @property
    def label(self) -> str:
        """ "simulated ×10" on a simulated host, "" on a real one."""
        return f"simulated ×{self.scale:g}" if self.simulated else ""

    def as_dict(self) -> dict:
        """For pages and JSON (the browser labels and, where it must, converts)."""
        return {"scale": self.scale, "simulated": self.simulated, "label": self.label}


REAL = HostClock()


def host_clock(host) -> HostClock:
    """The host's clock as it is configured now (for a server about to start)."""
    if host is None or not getattr(host, "simulated", False):
        return REAL
    return HostClock(float(host.sim_time_scale or 1.0), simulated=True)


def run_clock(run) -> HostClock:
    """The clock a run's server started with: the speed recorded in its facts, else (a
    run from before it was recorded, or not started yet) its host's clock now."""
    facts = getattr(run, "facts", None) or {}
    if SCALE_FACT in facts:
        scale = facts[SCALE_FACT]
        if scale is None:
            return REAL
        try:
            return HostClock(float(scale), simulated=True)
        except (TypeError, ValueError):
            pass  # a damaged fact: fall back to the host
    return host_clock(getattr(run, "host", None))


def record_run_clock(run) -> HostClock:
    """Record the host's speed in the run's facts when its server starts (once: a
    redelivered start keeps what the first start recorded). Returns the run's clock."""
    if SCALE_FACT not in (run.facts or {}):
        clock = host_clock(run.host)
        run.facts = {**(run.facts or {}), SCALE_FACT: clock.scale if clock.simulated else None}
        # The run's own model class: an UPDATE of this one column, nothing else saved.
        type(run).objects.filter(pk=run.pk).update(facts=run.facts)
    return run_clock(run)


def context_clock(obj) -> HostClock:
    """The clock of whatever a page shows: a run, a host, a benchmark job (its context
    records the scale its harness used), a chat message (its run), or a clock."""
    if obj is None:
        return REAL
    if isinstance(obj, HostClock):
        return obj
    if isinstance(obj, dict):  # a benchmark job's context, or HostClock.as_dict()
        scale = obj.get("time_scale", obj.get("scale"))
        if obj.get("simulated") and scale:
            return HostClock(float(scale), simulated=True)
        return REAL
    meta = getattr(obj, "_meta", None)
    model = getattr(meta, "model_name", "")
    if model == "run":
        return run_clock(obj)
    if model == "host":
        return host_clock(obj)
    if model == "job":
        context = obj.context or {}
        if "time_scale" in context:
            return context_clock(context)
        run = obj.run if obj.run_id else None
        return run_clock(run) if run is not None else host_clock(obj.host)
    if model == "message":
        return run_clock(obj.run) if obj.run_id else REAL
    run = getattr(obj, "run", None)
    if run is not None:
        return run_clock(run)
    return REAL
