"""The audit log's page and its CSV export: admins only (who manage users), read-only —
nothing here, nor anywhere in the panel, edits or deletes a row (apps/audit)."""

from __future__ import annotations

from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from apps.accounts.roles import MANAGE_USERS
from apps.audit import selectors
from apps.core.csvsafe import csv_text

PAGE_SIZE = 100


@require_GET
@permission_required(MANAGE_USERS, raise_exception=True)
def audit_log(request: HttpRequest) -> HttpResponse:
    f, errors = selectors.AuditFilter.from_params(request.GET)
    rows = selectors.entries(f)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "current": "audit",
        "page": page,
        "filter": f,
        "errors": errors,
        "choices": selectors.choices(),
        "query": query.urlencode(),
    }
    return render(request, "overview/audit.html", context)


@require_GET
@permission_required(MANAGE_USERS, raise_exception=True)
def audit_csv(request: HttpRequest) -> HttpResponse:
    f, _ = selectors.AuditFilter.from_params(request.GET)
    text = csv_text(selectors.CSV_FIELDS, selectors.csv_rows(selectors.entries(f)))
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="sparkpanel-audit-{stamp}.csv"'
    return response
