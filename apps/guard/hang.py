"""Hang detection: a pure state machine over what the host agent sees of a ready run each
scrape — its /metrics (requests running, the generation counter), its /health, and its
log when /health fails.

A run is hung when
* **stalled**: requests are running and the generation counter has not moved for
  `stall_s` seconds (vLLM wedged: servers seen stuck for over an hour with /health green);
* **engine dead**: its log says vLLM's engine process is gone (`EngineDeadError`,
  `EngineCore encountered an issue`) — the API server lives on and fails every request;
* **unhealthy**: /health failed `health_fails` scrapes in a row while the server lives.

One `Hang` per episode: the first observation that meets a rule returns it, later ones
return None until the run shows it is alive again (a token generated with /health ok,
or nothing running and /health ok). No clocks, no I/O: tests replay any sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from vllm_adapter.logparse import engine_died

STALL_S = 120.0
HEALTH_FAILS = 3
STALLED, ENGINE_DEAD, UNHEALTHY = "stalled", "engine_dead", "unhealthy"


@dataclass(frozen=True)
class Hang:
    kind: str  # STALLED, ENGINE_DEAD or UNHEALTHY
    message: str  # one sentence with the evidence, for the incident and the banner
    evidence: dict = field(default_factory=dict)


class HangDetector:
    def __init__(self, stall_s: float = STALL_S, health_fails: int = HEALTH_FAILS):
        if not (isinstance(stall_s, int | float) and stall_s > 0):
            raise ValueError(f"stall_s must be a positive number of seconds, not {stall_s!r}")
        if isinstance(health_fails, bool) or not isinstance(health_fails, int) or health_fails < 1:
            raise ValueError(f"health_fails must be an int of at least 1, not {health_fails!r}")
        self.stall_s, self.health_fails = float(stall_s), health_fails
        self.reported = False
        self._generated: float | None = None
        self._progress_at: float | None = None
        self._failures = 0

    def observe(
        self,
        now: float,
        *,
        running: float | None,
        generated: float | None,
        health_ok: bool | None,
        log_lines: Iterable[str] = (),
    ) -> Hang | None:
        """One scrape: requests running and the generation counter from /metrics (None
        when it could not be read), /health (None: not asked), and the log lines read
        since the last scrape (the agent reads them when /health fails)."""
        moved = generated is not None and (self._generated is None or generated > self._generated)
        if generated is not None:
            self._generated = generated
        idle = running is not None and running == 0
        if moved or idle or self._progress_at is None:
            self._progress_at = now
        self._failures = self._failures + 1 if health_ok is False else 0
        if health_ok and (moved or idle):
            self.reported = False  # alive again: a later hang is a new episode
        if self.reported:
            return None
        dead = next((line for line in log_lines if engine_died(line)), None)
        hang = None
        if dead is not None:
            hang = Hang(ENGINE_DEAD, f"vLLM's engine process died: {dead.strip()[:200]}",
                        {"log_line": dead.strip()[:500], "health_ok": health_ok})  # fmt: skip
        elif self._failures >= self.health_fails:
            hang = Hang(UNHEALTHY, f"/health failed {self._failures} times in a row while the "
                        "server process is alive", {"health_failures": self._failures})  # fmt: skip
        elif running and now - self._progress_at >= self.stall_s:
            stuck = now - self._progress_at
            hang = Hang(
                STALLED,
                f"{running:g} request(s) running and no token generated for {stuck:.0f} s "
                f"(vllm:generation_tokens stays at {self._generated:g})",
                {"running": running, "generation_tokens": self._generated,
                 "stalled_s": round(stuck, 1), "health_ok": health_ok},
            )  # fmt: skip
        if hang is not None:
            self.reported = True
        return hang
