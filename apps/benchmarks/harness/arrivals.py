"""Open-loop arrivals: when each request of a rate level is due, and when a level has
stopped keeping up (its backlog grows without bound).

The intervals follow `vllm bench serve --request-rate R --burstiness B`: gamma-distributed
with shape B and scale 1 / (R·B), so their mean is 1/R whatever B is and their
coefficient of variation is 1/√B — B = 1 is a Poisson process (exponential intervals),
B < 1 is burstier, B > 1 smoother; `constant` sends every 1/R exactly. A seed makes the
schedule repeatable (the same seed gives the same arrival times, so two recipes can be
compared on the same traffic).

Ramp-up: over the first `ramp_up_s` seconds the rate grows linearly from 0 to R. The
schedule is drawn at the full rate and mapped through the ramp's cumulative intensity
(Λ(t) = R·t²/(2·ramp) during the ramp, then R·(t − ramp/2)), so the intervals keep their
shape and only the clock is stretched at the start.

Times are in simulated seconds (the harness's `time_scale` turns them into wall time); the
level sends each request at its absolute due time from the level's start, so a late wake
never shifts the requests after it (no drift). How late each send was is reported.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

KINDS = ("constant", "poisson", "gamma")
MAX_RATE = 10_000.0  # requests per second: far beyond what a Spark serves
MAX_RAMP_S = 3600.0
# Saturation: over the last WINDOW arrivals, the backlog (arrived − finished) grew by at
# least SLOPE per arrival (a quarter of the requests pile up), its low point rose as much
# (the newer half's lowest backlog is SLOPE × WINDOW/2 above the older half's: a burst
# that the server then drains does not count), and it stands at FLOOR or more.
SATURATION_WINDOW = 40
SATURATION_SLOPE = 0.25
SATURATION_FLOOR = 16


@dataclass(frozen=True)
class Arrivals:
    """An open-loop level's traffic: `rate` requests per (simulated) second."""

    rate: float
    kind: str = "poisson"
    burstiness: float = 1.0
    ramp_up_s: float = 0.0
    seed: int = 0
    max_concurrency: int | None = None  # at most this many in flight; later arrivals wait

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, int | float) and 0 < self.rate <= MAX_RATE):
            raise ValueError(f"the request rate must be above 0 and at most {MAX_RATE:g}/s")
        if self.kind not in KINDS:
            raise ValueError(f"arrivals are {', '.join(KINDS)}, not {self.kind!r}")
        if not 0.01 <= self.burstiness <= 100:
            raise ValueError("burstiness must be between 0.01 and 100 (1 is Poisson)")
        if not 0 <= self.ramp_up_s <= MAX_RAMP_S:
            raise ValueError(f"the ramp-up must be between 0 and {MAX_RAMP_S:g} s")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("the concurrency cap must be at least 1")

    @property
    def shape(self) -> float:
        """The gamma shape of the intervals (1 for Poisson; none for constant)."""
        return 1.0 if self.kind == "poisson" else self.burstiness

    def describe(self) -> str:
        what = {"constant": "constant", "poisson": "Poisson"}.get(
            self.kind, f"gamma (burstiness {self.burstiness:g})"
        )
        text = f"{self.rate:g} req/s, {what}"
        if self.ramp_up_s:
            text += f", ramp-up {self.ramp_up_s:g} s"
        if self.max_concurrency:
            text += f", at most {self.max_concurrency} in flight"
        return text


def offsets(arrivals: Arrivals, count: int) -> list[float]:
    """The due time of each of `count` requests, in seconds from the level's start; the
    first is due at once."""
    rng = random.Random(arrivals.seed)  # noqa: S311 — a repeatable schedule, not a secret
    mean = 1.0 / arrivals.rate
    times, now = [], 0.0
    for _ in range(count):
        times.append(now)
        if arrivals.kind == "constant":
            now += mean
        else:
            shape = arrivals.shape
            now += rng.gammavariate(shape, mean / shape)
    return [_ramped(t, arrivals.ramp_up_s) for t in times]


def _ramped(t: float, ramp: float) -> float:
    """The time at which a full-rate process's time `t` falls under a linear ramp."""
    if ramp <= 0:
        return t
    if t < ramp / 2:
        return math.sqrt(2 * ramp * t)
    return t + ramp / 2


class Saturation:
    """Watches the backlog at each arrival; `tripped` once it grows without bound.

    A server below capacity still lets the backlog climb during a burst of arrivals (and,
    answering in batches, drops it again all at once): a slope alone tripped on such a
    climb at 20 req/s with answers taking 0.17 s on average (bench.peers_accuracy's open
    loop). What a server that keeps up never does is keep the backlog's low point rising."""

    def __init__(
        self,
        window: int = SATURATION_WINDOW,
        slope: float = SATURATION_SLOPE,
        floor: int = SATURATION_FLOOR,
    ):
        self.window, self.slope, self.floor = window, slope, floor
        self.backlog: list[int] = []
        self.tripped = False
        self.reason = ""

    def observe(self, backlog: int) -> bool:
        self.backlog.append(backlog)
        recent = self.backlog[-self.window :]
        if self.tripped or len(recent) < self.window or backlog < self.floor:
            return self.tripped
        growth = _slope(recent)
        half = self.window // 2
        trough_rise = min(recent[half:]) - min(recent[:half])
        if growth >= self.slope and trough_rise >= self.slope * half:
            self.tripped = True
            self.reason = (
                f"the backlog grew by {growth:.2f} requests per arrival over the last "
                f"{self.window} arrivals, to {backlog}: the server is not keeping up"
            )
        return self.tripped


def _slope(values: list[int]) -> float:
    """Least-squares slope of `values` against their index."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den if den else 0.0
