"""The gateway's pages: Usage (/usage/: requests and tokens per user and model, per day or
hour, with a chart and a CSV export; everyone sees their own, admins everyone's) and Models
(/gateway/: the public names, the runs serving each, the aliases operators set)."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import EDIT_RECIPES, MANAGE_USERS
from apps.audit import services as audit
from apps.gateway import catalog, usage
from apps.gateway.models import ModelAlias, OnDemand, UsageRecord, alias_name_problem
from apps.gateway.routing import build as build_routes
from apps.recipes.models import Recipe
from sparkdomain.flags import SERVED_NAME

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
    chart = {  # bench-charts.js's bars: the x axis and its legend entry are the bucket
        "scenarios": [timezone.localtime(p["t"]).strftime(fmt) for p in points],
        "x_label": f["bucket"],
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
        "refused": usage.refusals_today(None if f["everyone"] else request.user),
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


class AliasForm(forms.Form):
    name = forms.CharField(max_length=128, help_text="The name clients ask for, e.g. team-default.")
    recipe = forms.ModelChoiceField(queryset=Recipe.objects.order_by("name"))

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        if not SERVED_NAME.match(name):
            raise forms.ValidationError("Letters, digits and . _ - : / only, up to 128.")
        problem = alias_name_problem(name)
        if problem:
            raise forms.ValidationError(problem)
        return name


class OnDemandForm(forms.ModelForm):
    """Put a recipe in the on-demand catalog, or change its entry (operators)."""

    idle_minutes = forms.IntegerField(
        min_value=1, max_value=7 * 24 * 60, initial=15, label="Idle timeout (minutes)",
        help_text="Stopped after this long without an inference request.",
    )  # fmt: skip

    class Meta:
        model = OnDemand
        fields = ["recipe", "hosts", "priority", "exclusive_group", "may_replace_manual",
                  "max_replicas", "replica_ttft_slo_s"]  # fmt: skip
        labels = {"hosts": "Sparks (none: any)", "may_replace_manual": "May replace manual runs"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["recipe"].queryset = Recipe.objects.order_by("name")
        self.fields["hosts"].required = False
        self.fields["max_replicas"].required = False  # blank: one copy
        if self.instance.pk:
            self.fields["idle_minutes"].initial = max(1, self.instance.idle_timeout_s // 60)

    def clean_max_replicas(self) -> int:
        return self.cleaned_data.get("max_replicas") or 1

    def save(self, commit: bool = True):
        self.instance.idle_timeout_s = self.cleaned_data["idle_minutes"] * 60
        return super().save(commit=commit)


def recipe_section(sender=None, *, recipe, user, **kwargs) -> list[dict]:
    """The recipe page's "On demand" section: its catalog entry, where it stands, and the
    form to put it on demand or change it (operators; apps/recipes/signals.py)."""
    entry = OnDemand.objects.filter(recipe=recipe).prefetch_related("hosts").first()
    context = {"entry": entry, "name": recipe.public_name, "next": recipe.get_absolute_url()}
    if entry is not None:
        for row in catalog.overview(only=entry.pk):
            context.update(state=row["state"], sparks=row["sparks"], cold=row["cold"],
                           replicas=row["replicas"], idle=row["idle"])  # fmt: skip
    if user is not None and user.has_perm(EDIT_RECIPES):
        form = OnDemandForm(instance=entry, initial={"recipe": recipe.pk})
        form.fields["recipe"].widget = forms.HiddenInput()
        context["form"] = form
    return [{"template": "gateway/_recipe_on_demand.html", "context": context}]


def _back(request: HttpRequest, default: str) -> HttpResponse:
    """Back to the page the form was on (a recipe's page), when it is one of ours."""
    target = str(request.POST.get("next", ""))
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts=None) \
            and target.startswith("/recipes/"):  # fmt: skip
        return redirect(target + "#on-demand")
    return redirect(default)


def _entry_fields(entry: OnDemand) -> dict:
    return {"recipe": entry.recipe.name, "hosts": sorted(h.name for h in entry.hosts.all()),
            "priority": entry.priority, "idle_timeout_s": entry.idle_timeout_s,
            "exclusive_group": entry.exclusive_group,
            "may_replace_manual": entry.may_replace_manual,
            "max_replicas": entry.max_replicas,
            "replica_ttft_slo_s": entry.replica_ttft_slo_s}  # fmt: skip


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def on_demand_save(request: HttpRequest) -> HttpResponse:
    """Add a recipe to the on-demand catalog, or change its entry (one per recipe)."""
    raw = str(request.POST.get("recipe", ""))
    # The entry of that recipe, when there is one (the form refuses what is not a recipe).
    existing = (OnDemand.objects.filter(recipe_id=int(raw)).first()
                if raw.isdigit() and len(raw) < 19 else None)  # fmt: skip
    before = _entry_fields(existing) if existing else None
    form = OnDemandForm(request.POST, instance=existing)
    if not form.is_valid():
        context = _models_context(request, on_demand_form=form)
        return render(request, "gateway/models.html", context, status=400)
    entry = form.save()
    audit.record("gateway.on_demand", entry, before=before, after=_entry_fields(entry),
                 message="changed" if before else "added")  # fmt: skip
    messages.success(request, f"“{entry.recipe}” is on demand: a request for "
                     f"{entry.recipe.public_name} loads it.")  # fmt: skip
    return _back(request, reverse("gateway-models") + "#on-demand")


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def on_demand_delete(request: HttpRequest, pk: int) -> HttpResponse:
    entry = get_object_or_404(OnDemand.objects.select_related("recipe"), pk=pk)
    before = _entry_fields(entry)
    audit.record("gateway.on_demand", entry, before=before, after=None, message="removed")
    entry.delete()
    messages.success(request, f"“{entry.recipe}” is no longer on demand: its runs stay until "
                     "someone stops them, and a request for it gets 503 again.")  # fmt: skip
    return _back(request, reverse("gateway-models") + "#on-demand")


def _models_context(request: HttpRequest, form: AliasForm | None = None,
                    on_demand_form: OnDemandForm | None = None) -> dict:  # fmt: skip
    table = build_routes("")
    names = sorted(set(table.known) | set(table.ready))
    rows = [{"name": n, "replicas": table.ready.get(n, []),
             "recipes": sorted(set(table.known.get(n).recipes)) if n in table.known else [],
             "starting": table.known[n].starting if n in table.known else []}
            for n in names]  # fmt: skip
    aliases = ModelAlias.objects.select_related("recipe")
    return {"current": "models", "rows": rows, "aliases": aliases,
            "alias_form": form or AliasForm(), "base": request.build_absolute_uri("/v1"),
            "can_edit": request.user.has_perm(EDIT_RECIPES),
            "on_demand": catalog.overview(),
            "on_demand_form": on_demand_form or OnDemandForm()}  # fmt: skip


@require_http_methods(["GET", "POST"])
def models_page(request: HttpRequest) -> HttpResponse:
    """/gateway/: the public model names, which runs serve each now, and the aliases
    (operators add and remove them)."""
    if request.method == "POST":
        if not request.user.has_perm(EDIT_RECIPES):
            raise PermissionDenied
        form = AliasForm(request.POST)
        if not form.is_valid():
            return render(
                request, "gateway/models.html", _models_context(request, form), status=400
            )
        ModelAlias.objects.create(
            name=form.cleaned_data["name"], recipe=form.cleaned_data["recipe"]
        )
        messages.success(request, f"Alias “{form.cleaned_data['name']}” added.")
        return redirect("gateway-models")
    return render(request, "gateway/models.html", _models_context(request))


@require_POST
@permission_required(EDIT_RECIPES, raise_exception=True)
def alias_delete(request: HttpRequest, pk: int) -> HttpResponse:
    alias = get_object_or_404(ModelAlias, pk=pk)
    alias.delete()
    messages.success(request, f"Alias “{alias.name}” removed: new requests for it get 404.")
    return redirect("gateway-models")
