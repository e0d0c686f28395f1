"""The Usage page (/usage/): requests and tokens per user and model, per day or hour, with
a chart and a CSV export. Everyone sees their own; admins (manage users) see everyone's."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from apps.accounts.roles import MANAGE_USERS
from apps.gateway import usage
from apps.gateway.models import UsageRecord

PERIODS = {"1": ("the last 24 hours", 1), "7": ("the last 7 days", 7),
           "30": ("the last 30 days", 30), "90": ("the last 90 days", 90)}  # fmt: skip


def _filters(request: HttpRequest) -> dict:
    period = request.GET.get("days", "7")
    if period not in PERIODS:
        period = "7"
    label, days = PERIODS[period]
    bucket = request.GET.get("by", "hour" if days == 1 else "day")
    if bucket not in ("hour", "day"):
        bucket = "day"
    everyone = request.user.has_perm(MANAGE_USERS)
    who = request.GET.get("user", "")[:150] if everyone else ""
    user = request.user
    if everyone:
        user = get_user_model().objects.filter(username=who).first() if who else None
    model = request.GET.get("model", "")[:128]
    since = timezone.now() - timedelta(days=days)
    return {"period": period, "period_label": label, "bucket": bucket, "everyone": everyone,
            "who": who, "user": user, "model": model, "since": since}  # fmt: skip


def _queryset(f: dict):
    if f["everyone"] and f["who"] and f["user"] is None:
        return UsageRecord.objects.none()  # an unknown user: nothing, not everything
    return usage.rows(since=f["since"], user=f["user"], model=f["model"] or None)


@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    usage.drain(wait_s=0.5)
    f = _filters(request)
    qs = _queryset(f)
    points = usage.series(qs, f["bucket"])
    fmt = "%b %d %H:00" if f["bucket"] == "hour" else "%b %d"
    chart = {
        "scenarios": [timezone.localtime(p["t"]).strftime(fmt) for p in points],
        "unit": "tokens",
        "y_label": "tokens",
        "series": [
            {"label": "prompt tokens", "values": [p["prompt"] for p in points]},
            {"label": "completion tokens", "values": [p["completion"] for p in points]},
        ],
    }
    table = usage.by_user_and_model(qs)
    totals = qs.aggregate(**usage.TOTALS)
    models = sorted(
        set(UsageRecord.objects.filter(at__gte=f["since"]).values_list("model", flat=True))
    )
    context = {
        "current": "usage", **f, "periods": PERIODS, "points": points, "chart": chart,
        "table": table, "totals": totals, "models": models,
        "users": get_user_model().objects.order_by("username").values_list("username", flat=True)
        if f["everyone"] else [],
        "query": request.GET.urlencode(),
    }  # fmt: skip
    return render(request, "gateway/usage.html", context)


@require_GET
def usage_csv(request: HttpRequest) -> HttpResponse:
    usage.drain(wait_s=0.5)
    f = _filters(request)
    response = HttpResponse(usage.csv_text(_queryset(f)), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="sparkpanel-usage-{stamp}.csv"'
    return response
