"""The Limits page (/gateway/limits/, admins only): the gateway's limits set in the panel,
not only in Django admin — each role's, each user's override, and each live key's own.

Every save is audited with the acting admin: a role's or user's row through
apps/audit/signals.py (`limit.create` / `limit.edit` / `limit.delete`), a key's through
apps/gateway/keys.py::key_set_limits (`key.limits`). Every gateway takes a change at its
next request (the records' generation is bumped). A form that does not hold answers 400
with the page and the error beside the field.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import MANAGE_USERS, ROLE_ORDER
from apps.gateway.keys import key_set_limits
from apps.gateway.limits import BOUNDS, FIELDS, limit_save
from apps.gateway.models import GatewayKey, Limit

ADMINS_ONLY = permission_required(MANAGE_USERS, raise_exception=True)
LABELS = {"requests_per_minute": ("Requests per minute", "requests per minute"),
          "concurrent_streams": ("Requests at once", "requests at once"),
          "tokens_per_day": ("Tokens per day", "tokens per UTC day")}  # fmt: skip


def limit_field(name: str) -> forms.IntegerField:
    """One bounded, optional limit field (blank: no limit of this kind), with errors that
    say the bounds."""
    label, unit = LABELS[name]
    top = BOUNDS[name]
    return forms.IntegerField(
        required=False, min_value=0, max_value=top, label=label,
        help_text=f"0 – {top:,}; blank: no limit.",
        error_messages={
            "min_value": f"A limit is 0 or more (blank: no limit of {unit}).",
            "max_value": f"At most {top:,} {unit}; leave it blank for no limit.",
            "invalid": "A whole number, e.g. 100000 (blank: no limit).",
        },
    )  # fmt: skip


class LimitForm(forms.Form):
    """The three limits; also the base of the profile page's key form (a key's own)."""

    requests_per_minute = limit_field("requests_per_minute")
    concurrent_streams = limit_field("concurrent_streams")
    tokens_per_day = limit_field("tokens_per_day")


class UserLimitForm(LimitForm):
    username = forms.CharField(max_length=150, label="User")

    field_order = ["username", *FIELDS]

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise forms.ValidationError(f"No user is called “{name}”.")
        return user


def _initial(row) -> dict:
    return {name: getattr(row, name) for name in FIELDS} if row is not None else {}


def _page(request: HttpRequest, bound: forms.Form | None = None, status: int = 200):
    """The page; `bound`: a form that did not hold, shown in its place (same prefix)."""

    def form(prefix: str, row=None, cls=LimitForm):
        if bound is not None and bound.prefix == prefix:
            return bound
        return cls(prefix=prefix, initial=_initial(row))

    rows = Limit.objects.select_related("user")
    by_role = {row.role: row for row in rows if not row.user_id}
    roles = [{"role": role, "form": form(f"role-{role.value}", by_role.get(role.value))}
             for role in ROLE_ORDER]  # fmt: skip
    users = sorted((row for row in rows if row.user_id), key=lambda row: row.user.username)
    overrides = [{"user": row.user, "form": form(f"user-{row.user_id}", row)} for row in users]
    keys = [{"key": key, "form": form(f"key-{key.pk}", key)}
            for key in GatewayKey.objects.live().select_related("user")
            .order_by("user__username", "name", "pk")]  # fmt: skip
    context = {"current": "limits", "roles": roles, "overrides": overrides, "keys": keys,
               "add_form": form("add", cls=UserLimitForm)}  # fmt: skip
    return render(request, "gateway/limits.html", context, status=status)


def _done(request: HttpRequest, what: str, anchor: str) -> HttpResponse:
    messages.success(request, f"{what}: every gateway applies it at the next request.")
    return redirect(reverse("gateway-limits") + f"#{anchor}")


@require_GET
@ADMINS_ONLY
def limits_page(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@ADMINS_ONLY
def role_limits_save(request: HttpRequest, role: str) -> HttpResponse:
    if role not in {r.value for r in ROLE_ORDER}:
        raise Http404("No such role.")
    form = LimitForm(request.POST, prefix=f"role-{role}")
    if not form.is_valid():
        return _page(request, form, status=400)
    limit_save(role=role, values=form.cleaned_data)
    return _done(request, f"Limits of the role {role} saved", f"role-{role}")


@require_POST
@ADMINS_ONLY
def user_limits_add(request: HttpRequest) -> HttpResponse:
    form = UserLimitForm(request.POST, prefix="add")
    if not form.is_valid():
        return _page(request, form, status=400)
    user = form.cleaned_data["username"]
    limit_save(user=user, values=form.cleaned_data)
    return _done(request, f"Limits of {user.get_username()} saved", "users")


@require_POST
@ADMINS_ONLY
def user_limits_save(request: HttpRequest, pk: int) -> HttpResponse:
    """A user's override; every field blank removes it (their role's limits apply)."""
    user = get_object_or_404(get_user_model(), pk=pk)
    form = LimitForm(request.POST, prefix=f"user-{pk}")
    if not form.is_valid():
        return _page(request, form, status=400)
    row = limit_save(user=user, values=form.cleaned_data)
    what = f"Limits of {user.get_username()} saved" if row else (
        f"{user.get_username()} has no override any more (their role's limits apply)"
    )  # fmt: skip
    return _done(request, what, "users")


@require_POST
@ADMINS_ONLY
def key_limits_save(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(GatewayKey.objects.live().select_related("user"), pk=pk)
    form = LimitForm(request.POST, prefix=f"key-{pk}")
    if not form.is_valid():
        return _page(request, form, status=400)
    key_set_limits(key=key, values=form.cleaned_data)
    return _done(request, f"Limits of the key “{key.name}” ({key.user}) saved", f"key-{pk}")
