from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from apps.hosts.models import Host
from apps.telemetry.selectors import agent_state, recent_incidents
from sparkdomain.meminfo import MeminfoError
from sparkdomain.spark import GB


@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for host in Host.objects.all():
        row = {
            "host": host,
            "active": list(host.runs.active().select_related("recipe").order_by("created_at")),
            "agent": agent_state(host),
            "incidents": recent_incidents(host),
        }
        try:
            memory = host.memory()
            row["memory"] = (memory.available_bytes / GB, memory.total_bytes / GB)
        except MeminfoError as exc:
            row["memory_error"] = str(exc)
        rows.append(row)
    return render(request, "hosts/list.html", {"rows": rows})
