"""The pages that look across every app: the dashboard (hosts, their agents, active runs and
telemetry, with the team notices) and the 500 page (a JSON error under /api/)."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import loader
from django.views.decorators.http import require_GET

from apps.api.errors import DATABASE_UNAVAILABLE, json_error
from apps.core.forms import NoticeForm
from apps.core.models import Notice
from apps.hosts.models import Host
from apps.runs.colocation import runs_on
from apps.telemetry.selectors import agent_state, backfill


@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    hosts = [
        {
            "host": host,
            "agent": agent_state(host),
            "runs": runs_on(host),
            "tele_id": f"tele-host-{host.pk}",
            "backfill_id": f"tele-host-{host.pk}-data",
            "backfill": backfill(host),
        }
        for host in Host.objects.in_service()  # a retired Spark has its page, not a line here
    ]
    return render(
        request,
        "core/dashboard.html",
        {"notices": Notice.objects.recent(), "notice_form": NoticeForm(), "hosts": hosts},
    )


DATABASE_ERRORS = (OperationalError, InterfaceError)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500. A database that is locked, restarting or unreachable is a 503 that says
    so (nothing was half-saved: writes are transactions); anything else is the plain 500
    page. Renders without touching the database or the session."""
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_ERRORS):
        if request.path.startswith("/api/"):
            response = json_error(503, "database_unavailable", DATABASE_UNAVAILABLE)
        else:
            html = loader.get_template("503.html").render({"message": DATABASE_UNAVAILABLE})
            response = HttpResponse(html, status=503)
        response["Retry-After"] = "5"
        return response
    return HttpResponse(loader.get_template("500.html").render(), status=500)
