"""Hang detection: a pure state machine over what the host agent sees of a ready run each
scrape — its /metrics (requests running, the token counters, the KV cache), its /health,
and its log when /health fails.

A run is hung when
* **stalled**: requests are running and the engine has shown no progress — no token
  generated, no prompt counted, no change in its KV cache — for `stall_s` seconds, and
  for at least `prefill_allowance_s` (vLLM wedged: servers seen stuck for over an hour
  with /health green);
* **engine dead**: its log says vLLM's engine process is gone (`EngineDeadError`,
  `EngineCore encountered an issue`) — the API server lives on and fails every request;
* **unhealthy**: /health failed `health_fails` scrapes in a row while the server lives.

A long prefill is not a hang (docs/guard.md). What vLLM V1 exports while one runs (read
in vllm/v1/core/sched/scheduler.py, v1/engine/async_llm.py and v1/metrics/loggers.py,
0.32 and 0.33): *no token counter moves* — the engine core emits no output for a partial
prefill ("EngineCore returns no partial prefill outputs"), and `vllm:prompt_tokens` (the
whole prompt) and `vllm:iteration_tokens_total` are counted from outputs only, in the step
that produces the request's first token, together with `vllm:generation_tokens`. What does
move is the scheduler's state, published after every engine step: a chunked prefill
allocates KV blocks chunk by chunk, so `vllm:kv_cache_usage_perc` changes each step. A
wedged engine publishes nothing, so any change of it is progress. The one thing no metric
shows is a single long step (a prefill without chunks, or a chunk late in a long prompt):
the stall time is therefore never shorter than the longest prompt the run accepts takes
at the slowest rate a Spark prefills (`prefill_allowance_s`).

One `Hang` per episode: the first observation that meets a rule returns it, later ones
return None until the run shows it is alive again (progress with /health ok, or nothing
running and /health ok). No clocks, no I/O: tests replay any sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkdomain.spark import PREFILL_TPS_FLOOR
from vllm_adapter.logparse import engine_died

STALL_S = 120.0
HEALTH_FAILS = 3
STALLED, ENGINE_DEAD, UNHEALTHY = "stalled", "engine_dead", "unhealthy"


def prefill_allowance_s(max_model_len: int | None, time_scale: float = 1.0) -> float:
    """Seconds one prompt of `max_model_len` tokens may take to prefill on a Spark at the
    slowest rate (sparkdomain.spark.PREFILL_TPS_FLOOR), on a clock `time_scale` times
    faster than the wall (a simulated Spark); 0 when the length is unknown."""
    if not max_model_len or max_model_len <= 0 or not time_scale > 0:
        return 0.0
    return max_model_len / PREFILL_TPS_FLOOR / time_scale


@dataclass(frozen=True)
class Hang:
    kind: str  # STALLED, ENGINE_DEAD or UNHEALTHY
    message: str  # one sentence with the evidence, for the incident and the banner
    evidence: dict = field(default_factory=dict)


def _grew(new: float | None, old: float | None) -> bool:
    return new is not None and (old is None or new > old)


class HangDetector:
    def __init__(
        self,
        stall_s: float = STALL_S,
        health_fails: int = HEALTH_FAILS,
        prefill_allowance_s: float = 0.0,
    ):
        if not (isinstance(stall_s, int | float) and stall_s > 0):
            raise ValueError(f"stall_s must be a positive number of seconds, not {stall_s!r}")
        if isinstance(health_fails, bool) or not isinstance(health_fails, int) or health_fails < 1:
            raise ValueError(f"health_fails must be an int of at least 1, not {health_fails!r}")
        if not (isinstance(prefill_allowance_s, int | float) and prefill_allowance_s >= 0):
            raise ValueError(
                f"prefill_allowance_s must be a number of seconds ≥ 0, not {prefill_allowance_s!r}"
            )
        self.stall_s, self.health_fails = float(stall_s), health_fails
        self.prefill_allowance_s = float(prefill_allowance_s)
        # How long nothing may move while requests run: the policy's stall time, and never
        # less than the longest prompt's prefill.
        self.stalled_after_s = max(self.stall_s, self.prefill_allowance_s)
        self.reported = False
        self._generated: float | None = None
        self._prompt: float | None = None
        self._kv_usage: float | None = None
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
        prompt: float | None = None,
        kv_usage: float | None = None,
    ) -> Hang | None:
        """One scrape: requests running, the generation and prompt counters and the KV
        cache usage from /metrics (None when not read), /health (None: not asked), and
        the log lines read since the last scrape (the agent reads them when /health
        fails)."""
        token = _grew(generated, self._generated)
        stepped = (
            token
            or _grew(prompt, self._prompt)
            or (kv_usage is not None and self._kv_usage is not None and kv_usage != self._kv_usage)
        )
        if generated is not None:
            self._generated = generated
        if prompt is not None:
            self._prompt = prompt
        if kv_usage is not None:
            self._kv_usage = kv_usage
        idle = running is not None and running == 0
        if stepped or idle or self._progress_at is None:
            self._progress_at = now
        self._failures = self._failures + 1 if health_ok is False else 0
        if health_ok and (stepped or idle):
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
        elif running and now - self._progress_at >= self.stalled_after_s:
            hang = self._stalled(now - self._progress_at, running, health_ok)
        if hang is not None:
            self.reported = True
        return hang

    def _stalled(self, stuck: float, running: float, health_ok: bool | None) -> Hang:
        generated = "?" if self._generated is None else f"{self._generated:g}"
        message = (f"{running:g} request(s) running and no token generated for {stuck:.0f} s "
                   f"(vllm:generation_tokens stays at {generated})")  # fmt: skip
        if self.prefill_allowance_s > self.stall_s:
            allowance = f"{self.prefill_allowance_s:.0f} s"
            message += f", nor any prefill progress, longer than the {allowance} the longest "
            message += "prompt may take"
        evidence = {
            "running": running, "generation_tokens": self._generated,
            "prompt_tokens": self._prompt, "kv_usage": self._kv_usage,
            "stalled_s": round(stuck, 1), "stall_s": self.stall_s,
            "prefill_allowance_s": round(self.prefill_allowance_s, 1), "health_ok": health_ok,
        }  # fmt: skip
        return Hang(STALLED, message, evidence)
