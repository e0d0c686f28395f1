"""The memory watchdog: a pure, deterministic state machine over MemAvailable readings.

A DGX Spark has one 128 GB pool for CPU and GPU and no OOM kill that saves it: when the
pool runs out the whole machine freezes and needs a power reset (SPEC §1, §6.1). The
host agent polls /proc/meminfo and feeds each MemAvailable reading to `Watchdog.observe`;
the decision says which level the host is at and whether to stop the run now.

Rules (`polls` = N, 2 by default):

* levels are "ok" < "warn" < "act";
* "warn" once MemAvailable is below `warn_bytes` for N consecutive readings, "act" once
  it is below `act_bytes` for N consecutive readings (straight from "ok" if need be);
  one low reading is never enough, so a single bad sample does not kill a run;
* entering "act" sets `stop_run` on that one decision only: once per episode, not on
  every poll while memory stays low. An episode ends when the level leaves "act";
* hysteresis: leaving "act" needs MemAvailable ≥ act + margin for N consecutive
  readings, leaving "warn" (back to "ok") needs ≥ warn + margin for N readings, so a
  reading that wobbles around a threshold does not flap the level;
* an unreadable reading (None) is reported as `unknown`, with an alert message, and
  never as a silent "ok". It keeps the level, does not break a run of low readings (low,
  unknown, low counts as two low readings in a row) and breaks any run of recovering
  ones (recovery must be seen, not assumed).

The forecast (`horizon_s`, the caller's time to its next poll): a leak fast enough to
fall from above the act line to far below it between two polls outruns the two-poll
rule — a Spark freezes before the second reading (vLLM's profiling can take gigabytes in
a second). So, when the caller passes `horizon_s`, the watchdog also fits a least-squares
line (bytes per second) to the readable readings of the last `trend_s` seconds and acts
early when all of these hold:

* the reading is below the warn threshold. A planned run ends above it by design (the
  planner's "fits" keeps the warn line free), so the steep fall of a healthy start — the
  weights streaming in, the KV cache allocated at once — never trips the forecast, however
  fast; a run that passes the warn line and keeps falling is past its plan;
* at least `TREND_POINTS` readings in the window, each lower than the one before (a fall,
  not noise around a steady value: a steady run never trips it);
* the line reaches the act threshold within `horizon_s` (doubled while the kernel reports
  memory pressure, PSI ``some avg10`` ≥ `PRESSURE_PCT`: reclaim stalls slow the kill too);
* the level is not "act" already.

Such a decision enters "act" with `stop_run` and `predicted` set, and a message with the
rate and the time left. `eta_s` on every decision says when the trend would reach the act
line (None when memory is not falling): the live chart's forecast.

Several runs on one Spark (co-location): a stop frees one run's memory, and another may
be needed. After the caller stopped one of several runs it calls `rearm(now, settle_s)`:
while the level stays "act", the next `polls` readings below the act threshold taken
`settle_s` or more after the stop (time for the killed server's memory to come back) stop
one more run (`stop_run` again, once; the caller may rearm again). Recovery ends it as any
episode.

No clocks, no I/O: the caller passes the reading and the time, so tests replay any
memory curve exactly.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass

GIB = 2**30

OK = "ok"
WARN = "warn"
ACT = "act"
LEVELS = (OK, WARN, ACT)

HISTORY_S = 60.0
TREND_S = 3.0  # the forecast's window
TREND_POINTS = 3  # readings in a row, each lower than the last, before it forecasts
PRESSURE_PCT = 10.0  # PSI memory "some avg10" from which the horizon doubles

__all__ = [
    "ACT",
    "GIB",
    "LEVELS",
    "OK",
    "WARN",
    "Decision",
    "Watchdog",
]


@dataclass(frozen=True)
class Decision:
    """What one reading means.

    level / previous: the level after and before this reading; changed: they differ.
    stop_run: stop the run now (True on the reading that enters "act", once per episode;
        after `Watchdog.rearm`, once more when memory stays short).
    unknown: the reading was missing (meminfo unreadable); level is then the last known.
    message: one human sentence with the numbers, for the log, an alert or an incident.
    available_bytes / at: the reading itself (None when unknown) and its time.
    predicted: this decision entered "act" on the forecast, before two readings crossed.
    eta_s: seconds until the recent fall would reach the act threshold (0 when below it;
        None when memory is not falling or too few readings say so).
    fall_bytes_s: the recent fall in bytes per second (None as for eta_s).
    """

    level: str
    previous: str
    changed: bool
    stop_run: bool
    unknown: bool
    message: str
    available_bytes: int | None
    at: float
    predicted: bool = False
    eta_s: float | None = None
    fall_bytes_s: float | None = None


def _gib(value: int, *others: int) -> str:
    """Bytes as GiB with one decimal, or more where one would make two numbers in the
    same sentence look equal ("2.96 GiB is below the 3.00 GiB", not "3.0 … 3.0")."""
    for digits in (1, 2, 3):
        text = f"{value / GIB:.{digits}f}"
        if all(text != f"{other / GIB:.{digits}f}" for other in others if other != value):
            return f"{text} GiB"
    return f"{value / GIB:.3f} GiB"


def _polls(n: int) -> str:
    return f"{n} poll" if n == 1 else f"{n} polls"


def _check_bytes(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of bytes, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


class Watchdog:
    """One host's watchdog; call `observe` once per poll, in time order."""

    def __init__(
        self,
        warn_bytes: int,
        act_bytes: int,
        polls: int = 2,
        clear_margin_bytes: int = GIB,
        *,
        history_s: float = HISTORY_S,
        trend_s: float = TREND_S,
    ) -> None:
        self.warn_bytes = _check_bytes("warn_bytes", warn_bytes, minimum=1)
        self.act_bytes = _check_bytes("act_bytes", act_bytes, minimum=1)
        if act_bytes >= warn_bytes:
            raise ValueError(
                f"act_bytes ({_gib(act_bytes)}) must be below warn_bytes ({_gib(warn_bytes)}): "
                "the run is stopped at the lower, more urgent threshold"
            )
        if isinstance(polls, bool) or not isinstance(polls, int) or polls < 1:
            raise ValueError(f"polls must be an int of at least 1, not {polls!r}")
        self.polls = polls
        self.clear_margin_bytes = _check_bytes("clear_margin_bytes", clear_margin_bytes, minimum=0)
        if not (isinstance(history_s, int | float) and history_s > 0 and math.isfinite(history_s)):
            raise ValueError(f"history_s must be a positive number of seconds, not {history_s!r}")
        self.history_s = float(history_s)
        if not (isinstance(trend_s, int | float) and 0 < trend_s <= history_s):
            raise ValueError(f"trend_s must be a positive number up to history_s, not {trend_s!r}")
        self.trend_s = float(trend_s)

        self._level = OK
        # Consecutive readable polls below each threshold ...
        self._below_warn = 0
        self._below_act = 0
        # ... and at or above each threshold plus the margin (the way out).
        self._clear_warn = 0
        self._clear_act = 0
        self._unknown = 0  # consecutive unknown readings
        # After `rearm`: readings below act counted from `_rearm_from` (None: not armed).
        self._rearm_from: float | None = None
        self._below_act_rearmed = 0
        self._last_at: float | None = None
        self._history: deque[tuple[float, int | None]] = deque()

    @property
    def level(self) -> str:
        return self._level

    @property
    def warn_clear_bytes(self) -> int:
        return self.warn_bytes + self.clear_margin_bytes

    @property
    def act_clear_bytes(self) -> int:
        return self.act_bytes + self.clear_margin_bytes

    def rearm(self, now: float, settle_s: float = 0.0) -> None:
        """The caller stopped one run and others are left: while the level stays "act",
        `polls` readings below the act threshold from `now + settle_s` on stop another
        (once per rearm). Nothing to do when the level is not "act"."""
        if self._level != ACT:
            return
        self._rearm_from = now + max(settle_s, 0.0)
        self._below_act_rearmed = 0

    def history(self) -> list[tuple[float, int | None]]:
        """(time, MemAvailable) for the last `history_s` seconds, oldest first; None marks
        an unreadable poll (a gap in an incident's memory curve, not a zero)."""
        return list(self._history)

    def observe(
        self,
        available_bytes: int | None,
        now: float,
        *,
        error: str | None = None,
        horizon_s: float | None = None,
        pressure_pct: float | None = None,
    ) -> Decision:
        """Take one poll's MemAvailable (None: it could not be read; `error` says why).
        `horizon_s`: seconds to the caller's next poll, which turns the forecast on;
        `pressure_pct`: PSI memory "some avg10", when the host has it."""
        if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
            raise ValueError(f"now must be a finite number of seconds, not {now!r}")
        if self._last_at is not None and now < self._last_at:
            raise ValueError(f"time went backwards: {now} after {self._last_at}")
        if available_bytes is not None:
            _check_bytes("available_bytes", available_bytes, minimum=0)
        self._last_at = now
        self._remember(now, available_bytes)

        previous = self._level
        if available_bytes is None:
            return self._observe_unknown(previous, now, error)

        v = available_bytes
        self._unknown = 0
        self._below_warn = self._below_warn + 1 if v < self.warn_bytes else 0
        self._below_act = self._below_act + 1 if v < self.act_bytes else 0
        self._clear_warn = self._clear_warn + 1 if v >= self.warn_clear_bytes else 0
        self._clear_act = self._clear_act + 1 if v >= self.act_clear_bytes else 0

        level = self._next_level(previous)
        fall = self._fall_rate(now)
        eta = None if fall is None else max(v - self.act_bytes, 0) / fall
        horizon = self._horizon(horizon_s, pressure_pct)
        predicted = (
            level != ACT
            and v < self.warn_bytes
            and horizon is not None
            and eta is not None
            and eta <= horizon
        )
        if predicted:
            level = ACT
        self._level = level
        stop_run = level == ACT and previous != ACT
        again = not stop_run and self._again(level, v, now)
        stop_run = stop_run or again
        if predicted:
            message = self._forecast_message(v, fall, eta, horizon, pressure_pct)
        elif again:
            message = (
                f"MemAvailable {_gib(v, self.act_bytes)} is still below the "
                f"{_gib(self.act_bytes, v)} act threshold for {_polls(self._below_act_rearmed)} "
                "after a run was stopped: stopping another run"
            )
        else:
            message = self._message(previous, level, v)
        if stop_run or level != ACT:
            self._rearm_from = None
        return Decision(
            level=level,
            previous=previous,
            changed=level != previous,
            stop_run=stop_run,
            unknown=False,
            message=message,
            available_bytes=v,
            at=now,
            predicted=predicted,
            eta_s=eta,
            fall_bytes_s=fall,
        )

    # --- internals ---------------------------------------------------------------------

    def _again(self, level: str, v: int, now: float) -> bool:
        """Armed (`rearm`) and `polls` readings below act since the stop settled."""
        if self._rearm_from is None or level != ACT or now < self._rearm_from:
            return False
        self._below_act_rearmed = self._below_act_rearmed + 1 if v < self.act_bytes else 0
        return self._below_act_rearmed >= self.polls

    def _fall_rate(self, now: float) -> float | None:
        """Bytes per second MemAvailable is falling, by least squares over the window's
        readable readings — when the last TREND_POINTS of them each fell; else None."""
        points = [(t, v) for t, v in self._history if v is not None and t >= now - self.trend_s]
        if len(points) < TREND_POINTS:
            return None
        tail = [v for _, v in points[-TREND_POINTS:]]
        if any(later >= earlier for earlier, later in itertools.pairwise(tail)):
            return None
        count = len(points)
        mean_t = sum(t for t, _ in points) / count
        mean_v = sum(v for _, v in points) / count
        stt = sum((t - mean_t) ** 2 for t, _ in points)
        if stt <= 0:
            return None
        slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / stt
        return -slope if slope < 0 else None

    @staticmethod
    def _horizon(horizon_s: float | None, pressure_pct: float | None) -> float | None:
        if horizon_s is None:
            return None
        if isinstance(horizon_s, bool) or not isinstance(horizon_s, int | float):
            raise ValueError(f"horizon_s must be a number of seconds, not {horizon_s!r}")
        if not (math.isfinite(horizon_s) and horizon_s >= 0):
            raise ValueError(f"horizon_s must be a finite number of seconds ≥ 0, not {horizon_s!r}")
        under_pressure = pressure_pct is not None and pressure_pct >= PRESSURE_PCT
        return float(horizon_s) * (2 if under_pressure else 1)

    def _forecast_message(
        self, v: int, fall: float, eta: float, horizon: float, pressure_pct: float | None
    ) -> str:
        act = self.act_bytes
        pressure = (
            f", with memory pressure at {pressure_pct:.0f} %"
            if pressure_pct is not None and pressure_pct >= PRESSURE_PCT
            else ""
        )
        return (
            f"MemAvailable {_gib(v, act)} is falling {fall / GIB:.2f} GiB/s{pressure}: it "
            f"would cross the {_gib(act, v)} act threshold in {eta:.2f} s, before the next "
            f"poll ({horizon:.2f} s): stopping the run"
        )

    def _remember(self, now: float, available: int | None) -> None:
        self._history.append((now, available))
        cutoff = now - self.history_s
        while self._history and self._history[0][0] < cutoff:
            self._history.popleft()

    def _next_level(self, level: str) -> str:
        n = self.polls
        if self._below_act >= n:
            return ACT
        if level == ACT:
            if self._clear_warn >= n:
                return OK
            if self._clear_act >= n:
                return WARN
            return ACT
        if self._below_warn >= n:
            return WARN
        if level == WARN and self._clear_warn < n:
            return WARN
        return OK

    def _observe_unknown(self, previous: str, now: float, error: str | None) -> Decision:
        self._unknown += 1
        # A gap breaks a run of recovering readings but not a run of low ones.
        self._clear_warn = 0
        self._clear_act = 0
        why = f" ({error})" if error else ""
        message = (
            f"MemAvailable is unknown{why} for {_polls(self._unknown)}: the watchdog cannot "
            f"tell how close the host is to freezing; the level stays {previous}"
        )
        if previous == ACT:
            message += " and the run was already told to stop"
        return Decision(
            level=previous,
            previous=previous,
            changed=False,
            stop_run=False,
            unknown=True,
            message=message,
            available_bytes=None,
            at=now,
        )

    def _message(self, previous: str, level: str, v: int) -> str:
        n = self.polls
        warn, act = self.warn_bytes, self.act_bytes
        warn_clear, act_clear = self.warn_clear_bytes, self.act_clear_bytes
        mem = f"MemAvailable {_gib(v, warn, act, warn_clear, act_clear)}"

        if level == ACT and previous != ACT:
            return (
                f"{mem} is below the {_gib(act, v)} act threshold for "
                f"{_polls(self._below_act)}: stopping the run"
            )
        if level == ACT:
            if v < act:
                return (
                    f"{mem} is still below the {_gib(act, v)} act threshold "
                    f"({_polls(self._below_act)}); the run was already told to stop"
                )
            return (
                f"{mem} is above the {_gib(act, v)} act threshold but has not recovered: "
                f"it must stay at or above {_gib(act_clear, v)} for {_polls(n)} "
                f"({self._clear_act} so far)"
            )
        if level == OK and previous != OK:
            return (
                f"{mem} has been at or above {_gib(warn_clear, v)} for "
                f"{_polls(self._clear_warn)}: back to ok"
            )
        if level == WARN and previous == ACT:
            return (
                f"{mem} has been at or above {_gib(act_clear, v)} for "
                f"{_polls(self._clear_act)}: down from act to warn (ok needs "
                f"{_gib(warn_clear, v)} for {_polls(n)})"
            )
        if level == WARN and previous == OK:
            return (
                f"{mem} is below the {_gib(warn, v)} warn threshold for "
                f"{_polls(self._below_warn)}: warning"
            )

        # No change: say where the reading stands and what is pending.
        if v < act:
            return (
                f"{mem} is below the {_gib(act, v)} act threshold "
                f"({self._below_act} of {_polls(n)} before the run is stopped)"
            )
        if v < warn:
            if level == WARN:
                return (
                    f"{mem} is below the {_gib(warn, v)} warn threshold "
                    f"({_polls(self._below_warn)}); act below {_gib(act, v)}"
                )
            return (
                f"{mem} is below the {_gib(warn, v)} warn threshold "
                f"({self._below_warn} of {_polls(n)} before warning)"
            )
        if level == WARN:
            return (
                f"{mem} is above the {_gib(warn, v)} warn threshold but has not recovered: "
                f"it must stay at or above {_gib(warn_clear, v)} for {_polls(n)} "
                f"({self._clear_warn} so far)"
            )
        return f"{mem} is ok (warn below {_gib(warn, v)}, act below {_gib(act, v)})"
