"""What telemetry pages show on load: the last minutes of history, the agent's state,
recent incidents."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.telemetry.models import HostSample, Incident

BACKFILL_MINUTES = 15
SERIES = ("kv_usage_pct", "running", "waiting", "prompt_tps", "generation_tps", "ttft_p50",
          "ttft_p95", "itl_p50", "itl_p95", "spec_acceptance_rate",
          "spec_acceptance_length")  # fmt: skip


def backfill(host, run=None, minutes: int = BACKFILL_MINUTES) -> dict:
    """Column-wise history for the charts (unix seconds; None where unknown)."""
    rows = HostSample.objects.filter(host=host, at__gte=timezone.now() - timedelta(minutes=minutes))
    if run is not None:
        rows = rows.filter(run=run)
    data: dict[str, list] = {"t": [], "mem_total": [], "mem_available": []}
    for key in SERIES:
        data[key] = []
    for row in rows.order_by("at"):
        data["t"].append(row.at.timestamp())
        data["mem_total"].append(row.mem_total)
        data["mem_available"].append(row.mem_available)
        for key in SERIES:
            data[key].append(getattr(row, key))
    latest = host.agent_sample if host.agent_live else None
    if run is not None and latest and latest.get("run") != run.pk:
        latest = None  # the host's sample is about another run (or none): not this one's
    return {
        "history": data,
        "warn_bytes": int(host.watchdog_warn_gib * 2**30),
        "act_bytes": int(host.watchdog_act_gib * 2**30),
        "window_s": minutes * 60,
        "latest": latest,
        "agent_live": host.agent_live,
        # A run's charts end at its last sample once it is over; live ones end now.
        "active": run.is_active if run is not None else True,
        "now": timezone.now().timestamp(),
    }


def agent_state(host) -> dict:
    sample = host.agent_sample or {}
    return {
        "live": host.agent_live,
        "seen_at": host.agent_seen_at,
        "error": host.agent_error,
        "level": sample.get("mem_level") if host.agent_live else None,
        "available_gb": (sample.get("mem_available") or 0) / 1e9 if host.agent_live else None,
        "total_gb": (sample.get("mem_total") or 0) / 1e9 if host.agent_live else None,
        "used_percent": (
            100 * (1 - sample["mem_available"] / sample["mem_total"])
            if host.agent_live and sample.get("mem_available") and sample.get("mem_total")
            else None
        ),
        "command": f"python manage.py hostagent --host {host.name}",
    }


def recent_incidents(host, limit: int = 10):
    return Incident.objects.filter(host=host).select_related("run")[:limit]
