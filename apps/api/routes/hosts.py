from django.http import HttpRequest
from ninja import Router
from ninja.pagination import paginate

from apps.accounts.roles import VIEW_PANEL
from apps.api.auth import require
from apps.api.errors import ERRORS
from apps.api.pagination import Page
from apps.api.routes.common import get_or_404
from apps.api.schemas import HostOut
from apps.benchmarks.models import J, Job
from apps.hosts.detail import stale_sample
from apps.hosts.models import Host
from sparkdomain.meminfo import MeminfoError

router = Router(tags=["hosts"])


def host_out(host: Host) -> dict:
    stale = stale_sample(host)
    if stale is not None:
        # As the hosts pages: a silent agent's last figures, marked stale with their age —
        # not this process's own reading, which is no Spark's memory but this machine's.
        total, available = stale["total_bytes"], stale["available_bytes"]
        memory = {"total_bytes": total, "available_bytes": available, "source": "agent",
                  "stale": True, "as_of": stale["seen_at"], "age_s": stale["age_s"]}  # fmt: skip
    else:
        try:
            reading, source = host.measured_memory()
            total, available = reading.total_bytes, reading.available_bytes
            memory = {"total_bytes": total, "available_bytes": available, "source": source}
            if source == "agent":
                memory["level"] = (host.agent_sample or {}).get("mem_level")
        except MeminfoError as exc:
            total = available = None
            memory = {"total_bytes": None, "available_bytes": None, "source": "unknown",
                      "error": str(exc)}  # fmt: skip
    memory["used_percent"] = (
        round(100 * (1 - available / total), 1) if total and available is not None else None
    )
    runs = list(host.runs.active().select_related("recipe").order_by("created_at", "pk"))
    active = runs[0] if runs else None
    jobs = Job.objects.active().filter(host=host)
    return {
        "name": host.name,
        "description": host.description,
        "engine": host.engine,
        "simulated": host.simulated,
        "worker_online": host.online,
        "last_heartbeat": host.last_heartbeat,
        "agent": {
            "live": host.agent_live,
            "seen_at": host.agent_seen_at,
            "error": host.agent_error,
        },
        "memory": memory,
        "active_run": {"id": active.pk, "state": active.state, "recipe": active.recipe.slug}
        if active
        else None,
        "active_runs": [{"id": r.pk, "state": r.state, "recipe": r.recipe.slug} for r in runs],
        "max_runs": host.max_runs,
        "jobs_running": jobs.exclude(state=J.QUEUED).count(),
        "jobs_queued": jobs.filter(state=J.QUEUED).count(),
        "retired_at": host.retired_at,
        "url": "/hosts/",
    }


@router.get("/hosts", response={200: list[HostOut], **ERRORS}, summary="List hosts")
@paginate(Page)
def list_hosts(request: HttpRequest):
    """Every Spark with its worker, host agent, memory, active run and benchmark queue."""
    require(request, VIEW_PANEL)
    return [host_out(h) for h in Host.objects.all()]


@router.get("/hosts/{name}", response={200: HostOut, **ERRORS}, summary="One host")
def get_host(request: HttpRequest, name: str):
    require(request, VIEW_PANEL)
    return host_out(get_or_404(Host.objects.all(), "host", name=name))
