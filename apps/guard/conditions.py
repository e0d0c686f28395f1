"""Conditions on a run's live figures that should reach people, each once per episode: KV
cache above 90 % for a minute (requests queue, vLLM preempts), and preemptions (vLLM ran out
of KV cache and recomputed requests). Pure: the agent feeds each second's derived sample
and the time; an alert comes back the first time a condition has held long enough, and
not again until it has been clear for `clear_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

KV_HIGH_PCT = 90.0
KV_HIGH_FOR_S = 60.0
TTFT_OVER_FOR_S = 300.0
CLEAR_S = 300.0  # quiet this long before the same condition alerts again


@dataclass(frozen=True)
class Alert:
    rule: str  # "kv_high" or "preemptions"
    message: str


class Episode:
    def __init__(self, hold_s: float, clear_s: float):
        self.hold_s, self.clear_s = hold_s, clear_s
        self.since: float | None = None  # the condition holds since
        self.quiet_since: float | None = None
        self.alerted = False

    def feed(self, now: float, holds: bool | None) -> bool:
        """True on the observation that makes it an alert (once per episode)."""
        if holds is None:  # unknown: neither starts nor ends anything
            return False
        if holds:
            self.quiet_since = None
            self.since = now if self.since is None else self.since
            if not self.alerted and now - self.since >= self.hold_s:
                self.alerted = True
                return True
            return False
        self.since = None
        self.quiet_since = now if self.quiet_since is None else self.quiet_since
        if self.alerted and now - self.quiet_since >= self.clear_s:
            self.alerted = False
        return False


class RunConditions:
    """One run's conditions."""

    def __init__(self, kv_pct: float = KV_HIGH_PCT, kv_for_s: float = KV_HIGH_FOR_S,
                 clear_s: float = CLEAR_S, ttft_slo_s: float | None = None,
                 ttft_for_s: float = TTFT_OVER_FOR_S):  # fmt: skip
        self.kv_pct, self.ttft_slo_s = kv_pct, ttft_slo_s
        self.kv = Episode(kv_for_s, clear_s)
        self.preempt = Episode(0.0, clear_s)
        self.ttft = Episode(ttft_for_s, clear_s)

    def observe(self, now: float, sample: dict) -> list[Alert]:
        alerts = []
        kv = sample.get("kv_usage_pct")
        if self.kv.feed(now, None if kv is None else kv > self.kv_pct):
            held = self.kv.hold_s
            text = f"KV cache at {kv:.0f} % for over {held:g} s: requests queue, vLLM preempts"
            alerts.append(Alert("kv_high", text))
        preempted = sample.get("preemptions")  # over the agent's last minute
        if self.preempt.feed(now, None if preempted is None else preempted > 0):
            alerts.append(Alert("preemptions", f"vLLM preempted {preempted:g} request(s) in the "
                                "last minute: its KV cache ran out"))  # fmt: skip
        p95 = sample.get("ttft_p95")
        if self.ttft_slo_s is not None and self.ttft.feed(
            now, None if p95 is None else p95 > self.ttft_slo_s
        ):
            minutes = self.ttft.hold_s / 60
            text = f"TTFT p95 {p95:.2f} s over the recipe's SLO of {self.ttft_slo_s:g} s"
            alerts.append(Alert("ttft_slo", f"{text} for {minutes:g} min"))
        return alerts
