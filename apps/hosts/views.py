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


def _host_change(
    request: HttpRequest, name: str, change, *, done: str, refused: str = ""
) -> HttpResponse:
    """Apply `change` (host_retire or host_return) as the signed-in admin; `done` is said on
    success ({name}: the host's), `refused` + the service's reason otherwise."""
    host = get_object_or_404(Host, name=name)
    try:
        change(host=host, user=request.user)
    except HostRefused as exc:
        messages.error(request, f"{refused}{exc}")
    else:
        messages.success(request, done.format(name=host.name))
    return redirect("host-detail", name=host.name)


@require_POST
@permission_required(MANAGE_HOSTS, raise_exception=True)
def host_retire_view(request: HttpRequest, name: str) -> HttpResponse:
    return _host_change(
        request, name, host_retire, refused="Not retired: ",
        done="{name} is retired: the start and queue forms no longer offer it, and its "
        "history stays.",
    )  # fmt: skip


@require_POST
@permission_required(MANAGE_HOSTS, raise_exception=True)
def host_return_view(request: HttpRequest, name: str) -> HttpResponse:
    return _host_change(request, name, host_return, done="{name} is back in service.")
