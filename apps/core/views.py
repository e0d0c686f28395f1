"""The core pages: the system status, the team notices, /healthz and the 403 page (the
dashboard and the 500 page compose other apps: apps/overview/views.py)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from apps.accounts.roles import POST_NOTICES
from apps.core.forms import NoticeForm
from apps.core.models import Notice
from apps.core.selectors import system_status
from apps.core.services import notice_delete, notice_post


@require_GET
def status_partial(request: HttpRequest) -> HttpResponse:
    return render(
        request, "core/partials/status.html", {"status": system_status(check_workers=True)}
    )


@require_POST
@permission_required(POST_NOTICES, raise_exception=True)
def notice_create(request: HttpRequest) -> HttpResponse:
    form = NoticeForm(request.POST)
    if not form.is_valid():
        if request.htmx:
            # Keep what the user typed and say what is wrong, in place.
            return render(request, "core/partials/notice_form.html", {"notice_form": form})
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("dashboard")
    notice_post(author=request.user, **form.post_kwargs())
    if request.htmx:
        response = render(request, "core/partials/notice_form.html", {"notice_form": NoticeForm()})
        return trigger_client_event(response, "notice-posted")
    messages.success(request, "Notice posted.")
    return redirect("dashboard")


@require_POST
def notice_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    """The author, operators and admins may delete a notice; anyone else gets a 403."""
    notice = get_object_or_404(Notice, pk=pk)
    if not notice.can_delete(request.user):
        raise PermissionDenied
    notice_delete(notice=notice)
    if request.htmx:
        return HttpResponse("")  # the item swaps itself away
    messages.success(request, "Notice deleted.")
    return redirect("dashboard")


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and readiness for compose and load balancers; says nothing secret."""
    status = system_status()
    body = {"ok": status.ok, "database": status.database.ok, "redis": status.redis.ok}
    return JsonResponse(body, status=200 if status.ok else 503)


def permission_denied(request: HttpRequest, exception=None) -> HttpResponse:
    return render(request, "403.html", status=403)
