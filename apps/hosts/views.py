from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import MANAGE_HOSTS
from apps.hosts.detail import stale_sample
from apps.hosts.models import Host
from apps.hosts.services import HostRefused, host_retire, host_return
from apps.telemetry.selectors import agent_state, recent_incidents
from sparkdomain.meminfo import MeminfoError
from sparkdomain.spark import GB


@require_GET
def host_list(request: HttpRequest) -> HttpResponse:
    rows = []
    for host in Host.objects.in_service():
        row = {
            "host": host,
            "active": list(host.runs.active().select_related("recipe").order_by("created_at")),
            "agent": agent_state(host),
            "incidents": recent_incidents(host),
            # A silent agent's last figures, with their age (never shown as the memory now).
            "stale": stale_sample(host),
        }
        if row["stale"] is None:
            try:
                memory = host.memory()
                row["memory"] = (memory.available_bytes / GB, memory.total_bytes / GB)
            except MeminfoError as exc:
                row["memory_error"] = str(exc)
        rows.append(row)
    # Retired hosts apart, below the table: their history stays reachable from their pages.
    retired = Host.objects.retired().select_related("retired_by").order_by("-retired_at")
    return render(request, "hosts/list.html", {"rows": rows, "retired": list(retired)})


# Retire and bring back: admins, from the host's page (post/redirect/get; the refusal, or
# what happened, is a message on the page it redirects to).


@require_POST
@permission_required(MANAGE_HOSTS, raise_exception=True)
def host_retire_view(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    try:
        host_retire(host=host, user=request.user)
    except HostRefused as exc:
        messages.error(request, f"Not retired: {exc}")
    else:
        messages.success(
            request,
            f"{host.name} is retired: the start and queue forms no longer offer it, and its "
            "history stays.",
        )
    return redirect("host-detail", name=host.name)


@require_POST
@permission_required(MANAGE_HOSTS, raise_exception=True)
def host_return_view(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    try:
        host_return(host=host, user=request.user)
    except HostRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{host.name} is back in service.")
    return redirect("host-detail", name=host.name)
