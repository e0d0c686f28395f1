"""One host's page: its memory against the guard's lines, the latest telemetry, its vLLM,
engine and worker, its incidents and the runs it served."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from apps.hosts.models import Host, age_words
from apps.telemetry.selectors import agent_state, recent_incidents, run_samples
from sparkdomain.meminfo import MeminfoError
from sparkdomain.planner.utilization import startable_now
from sparkdomain.spark import GB, GIB

HISTORY_LIMIT = 50

# The latest sample's telemetry, in the order shown: (key, label, unit, decimals).
TELEMETRY = [
    ("running", "Requests running", "", 0),
    ("waiting", "Requests waiting", "", 0),
    ("kv_usage_pct", "KV cache used", "%", 1),
    ("prompt_tps", "Prompt tokens/s", "", 1),
    ("generation_tps", "Generated tokens/s", "", 1),
    ("requests_total", "Requests served (total)", "", 0),
    ("preemptions_total", "Preemptions (total)", "", 0),
    ("psi_some_avg10", "Memory pressure (PSI some, avg10)", "%", 2),
]


def guard_lines_gb(host: Host) -> tuple[float, float]:
    """(warn, act) in GB available, whichever unit the host stores them in."""
    warn = getattr(host, "watchdog_warn_gb", None)
    act = getattr(host, "watchdog_act_gb", None)
    if warn is None or act is None:
        warn, act = host.watchdog_warn_gib * GIB / GB, host.watchdog_act_gib * GIB / GB
    return float(warn), float(act)


def stale_sample(host: Host) -> dict | None:
    """The host agent's last memory figures once it has gone silent (its sample older than
    AGENT_STALE): what they were and how old they are, never passed off as the memory now.
    None while the agent is live, or when it never sent figures. The hosts pages and the
    API's hosts (apps/api/routes/hosts.py) both judge by it."""
    sample = host.agent_sample or {}
    total, available = sample.get("mem_total"), sample.get("mem_available")
    if host.agent_live or host.agent_seen_at is None or not total or available is None:
        return None
    elapsed = timezone.now() - host.agent_seen_at
    age = age_words(elapsed)
    return {
        "available_bytes": int(available),
        "total_bytes": int(total),
        "available_gb": available / GB,
        "total_gb": total / GB,
        "used_percent": 100 * (1 - available / total),
        "seen_at": host.agent_seen_at,
        "age_s": int(elapsed.total_seconds()),
        "age": age,
        "words": f"as of {age} ago — the host agent is silent",
    }


def memory_view(host: Host) -> dict:
    """What the page says about memory: available and total (GB), where the reading came
    from, the guard's lines, and which side of them the host is on. A silent agent's last
    figures are shown as what they are (`stale`, with their age), with no "now" drawn
    from them."""
    warn, act = guard_lines_gb(host)
    out: dict = {"warn_gb": warn, "act_gb": act}
    stale = stale_sample(host)
    if stale is not None:
        out.update(stale=stale, available_gb=stale["available_gb"], total_gb=stale["total_gb"],
                   used_percent=stale["used_percent"], level="stale",
                   source="the host agent's last sample")  # fmt: skip
        return out
    try:
        memory, source = host.measured_memory()
    except MeminfoError as exc:
        out["error"] = str(exc)
        return out
    available, total = memory.available_bytes / GB, memory.total_bytes / GB
    level = "act" if available < act else "warn" if available < warn else "ok"
    out.update(
        available_gb=available,
        total_gb=total,
        source="the host agent" if source == "agent" else "the panel's own reading",
        level=level,
        above_warn_gb=available - warn,
        used_percent=100 * (1 - available / total) if total else None,
        warn_percent=100 * (1 - warn / total) if total else None,
        act_percent=100 * (1 - act / total) if total else None,
    )
    spec = host.spec()
    out["startable"], out["gate"] = startable_now(
        memory.available_bytes, spec.cuda_visible_gib, spec.freeze_margin_gb
    )
    return out


def telemetry_view(host: Host) -> list[dict]:
    """The agent's latest figures: the host's, and each run's (named when it runs several)."""
    sample = host.agent_sample or {}
    if not host.agent_live:
        return []
    per_run = run_samples(sample)
    samples = per_run or [sample]
    rows = []
    for one in samples:
        prefix = f"run {one.get('run')}: " if len(per_run) > 1 else ""
        for key, label, unit, decimals in TELEMETRY:
            value = one.get(key)
            if value is None:
                continue
            rows.append({"label": prefix + label, "value": f"{float(value):,.{decimals}f}{unit}"})
    return rows


@require_GET
def host_detail(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host.objects.select_related("retired_by"), name=name)
    runs = host.runs.select_related("recipe", "started_by").order_by("-created_at", "-pk")
    context = {
        "host": host,
        "memory": memory_view(host),
        "agent": agent_state(host),
        "telemetry": telemetry_view(host),
        "sample_at": host.agent_seen_at,
        "incidents": recent_incidents(host, limit=25),
        "runs": runs[:HISTORY_LIMIT],
        "history_limit": HISTORY_LIMIT,
        "run_count": runs.count(),
        "active": list(host.runs.active().select_related("recipe").order_by("created_at")),
    }
    return render(request, "hosts/detail.html", context)
