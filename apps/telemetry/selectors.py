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
    for at, bucket in _buckets(rows.order_by("at", "pk")):
        data["t"].append(at.timestamp())
        data["mem_total"].append(bucket[0].mem_total)
        data["mem_available"].append(bucket[0].mem_available)
        for key in SERIES:
            data[key].append(_combined(bucket, key))
    latest = host.agent_sample if host.agent_live else None
    if run is not None and latest:
        latest = run_sample(latest, run.pk)
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


# Over several runs on one Spark (one row each per bucket), the host's charts add these up;
# the others are the first run's.
SUMMED = ("running", "waiting", "prompt_tps", "generation_tps")


def _buckets(rows):
    """The host's rows grouped by bucket time: one per run on it at that time."""
    bucket: list = []
    for row in rows:
        if bucket and row.at != bucket[0].at:
            yield bucket[0].at, bucket
            bucket = []
        bucket.append(row)
    if bucket:
        yield bucket[0].at, bucket


def _combined(bucket: list, key: str):
    values = [getattr(row, key) for row in bucket]
    if key in SUMMED and len(values) > 1:
        known = [v for v in values if v is not None]
        return sum(known) if known else None
    return values[0]


def run_sample(sample: dict, run_id: int) -> dict | None:
    """One run's live sample out of its host's: the host's memory with that run's own
    metrics (its entry in `runs`); None when the run is not in it."""
    entries = sample.get("runs")
    if entries is None:  # an agent from before co-location: the top level is its run
        return sample if sample.get("run") == run_id else None
    entry = next((e for e in entries if e.get("run") == run_id), None)
    if entry is None:
        return None
    host_keys = {k: v for k, v in sample.items() if k != "runs"}
    return {**host_keys, **entry}


def run_samples(sample: dict) -> list[dict]:
    """Every run's live sample out of its host's (see `run_sample`)."""
    entries = sample.get("runs")
    if entries is None:
        return [sample] if sample.get("run") else []
    return [s for e in entries if (s := run_sample(sample, e.get("run"))) is not None]


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
