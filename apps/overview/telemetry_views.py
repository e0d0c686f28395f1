"""The telemetry back-fill JSON (/telemetry/host/<name>/backfill.json and
/telemetry/run/<id>/backfill.json): the last minutes of samples a chart shows on load, read
from apps.telemetry's selectors for a Host or a Run."""

from __future__ import annotations

from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.accounts.roles import VIEW_PANEL
from apps.hosts.models import Host
from apps.runs.models import Run
from apps.telemetry.selectors import backfill


@require_GET
@never_cache
@permission_required(VIEW_PANEL, raise_exception=True)
def host_backfill(request: HttpRequest, name: str) -> JsonResponse:
    """The last minutes of a host's telemetry, as the dashboard's charts show them on load:
    fetched again by the page on every socket (re)connect, so a gap is filled."""
    return JsonResponse(backfill(get_object_or_404(Host, name=name)))


@require_GET
@never_cache
@permission_required(VIEW_PANEL, raise_exception=True)
def run_backfill(request: HttpRequest, pk: int) -> JsonResponse:
    """The last minutes of one run's telemetry (every phase, from queued on)."""
    run = get_object_or_404(Run.objects.select_related("host"), pk=pk)
    return JsonResponse(backfill(run.host, run=run))
