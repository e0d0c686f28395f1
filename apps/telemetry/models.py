"""Host telemetry history (downsampled) and watchdog incidents."""

from __future__ import annotations

from django.db import models


class HostSample(models.Model):
    """One 10-second bucket of a host's telemetry: means of the 1 Hz samples (minimum for
    MemAvailable, so a dip is never averaged away). None means unknown, never zero."""

    host = models.ForeignKey("hosts.Host", on_delete=models.CASCADE, related_name="samples")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="samples")  # fmt: skip
    at = models.DateTimeField(db_index=True)
    mem_total = models.BigIntegerField(null=True)
    mem_available = models.BigIntegerField(null=True)
    psi_some_avg10 = models.FloatField(null=True)
    kv_usage_pct = models.FloatField(null=True)
    running = models.FloatField(null=True)
    waiting = models.FloatField(null=True)
    prompt_tps = models.FloatField(null=True)
    generation_tps = models.FloatField(null=True)
    ttft_p50 = models.FloatField(null=True)
    ttft_p95 = models.FloatField(null=True)
    itl_p50 = models.FloatField(null=True)
    itl_p95 = models.FloatField(null=True)
    prefix_hit_rate = models.FloatField(null=True)
    preemptions = models.FloatField(null=True)
    # Speculative decoding over the bucket: accepted ÷ drafted tokens (0–1) and the mean
    # acceptance length (1 + accepted per draft); None for a run without it.
    spec_acceptance_rate = models.FloatField(null=True)
    spec_acceptance_length = models.FloatField(null=True)

    class Meta:
        ordering = ["host", "at"]
        indexes = [models.Index(fields=["host", "at"])]

    def __str__(self) -> str:
        return f"{self.host_id} @ {self.at:%H:%M:%S}"


class Incident(models.Model):
    """Something the watchdog saw or did, with the memory curve around it."""

    class Kind(models.TextChoices):
        ACT = "act", "Run stopped by the watchdog"
        WARN = "warn", "Memory low (warning)"
        ALERT = "alert", "Telemetry alert"
        HANG = "hang", "Run hung"

    host = models.ForeignKey("hosts.Host", on_delete=models.CASCADE, related_name="incidents")
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="incidents")  # fmt: skip
    recipe_name = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=8, choices=Kind.choices)
    at = models.DateTimeField(db_index=True)
    message = models.TextField()
    action = models.CharField(max_length=300, blank=True)
    # [[unix time, MemAvailable bytes or null], …] for the last minute.
    # What a hang was judged on (requests running, the generation counter, /health, the
    # log line): apps/guard/hang.py.
    evidence = models.JSONField(default=dict, blank=True)
    memory_curve = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.host_id} at {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def lowest_gib(self) -> float | None:
        values = [v for _, v in self.memory_curve if v is not None]
        return min(values) / 2**30 if values else None

    @property
    def lowest_text(self) -> str:
        """`lowest_gib` for a page: a number, or what is missing instead of a bare unit. An
        agent or worker silence (apps/guard/tasks.py) has no curve; an "unknown" alert's
        curve may hold only nulls."""
        lowest = self.lowest_gib
        if lowest is not None:
            return f"{lowest:.2f} GiB"
        if not self.memory_curve:
            return "none recorded: this incident carries no memory readings"
        return "unknown: MemAvailable could not be read in that minute"
