"""The profile page's "Gateway keys" card (apps/accounts/profile.py): create a key (shown
once, with lower limits of its own if its owner wants), revoke one, each key's usage and
own limits with what is left of them, and how much of the user's limits is used now — the
live figures from the gateway's Redis counters (apps/gateway/store.py)."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.accounts.profile import Section, redirect_showing_once, render_profile
from apps.accounts.roles import USE_CHAT
from apps.core.redisconn import RedisError
from apps.gateway import store, usage
from apps.gateway.keys import TooManyKeys, key_create, key_revoke
from apps.gateway.limit_views import LimitForm
from apps.gateway.limits import FIELDS as LIMIT_FIELDS
from apps.gateway.limits import Limits, limits_for, own_limits
from apps.gateway.models import GatewayKey
from apps.recipes.models import Recipe

MODELS_MAX = 50
MODEL_NAME_MAX = 128


class KeyForm(LimitForm):
    """A new key; the limit fields (LimitForm's, as the Limits page's) are the key's own:
    optional, below the account's, which apply to it anyway — a key handed to a tool or a
    colleague's script cannot spend the whole day's budget."""

    field_order = ["name", "models", "expires_days", *LIMIT_FIELDS]
    name = forms.CharField(max_length=100, help_text="What it is for, e.g. “Open WebUI”.")
    models = forms.CharField(
        required=False,
        max_length=4000,
        label="Only these models",
        help_text="Public model names, comma-separated; empty: every model.",
    )
    expires_days = forms.IntegerField(
        required=False, min_value=1, max_value=3650, label="Expires after (days)",
        help_text="Empty: never.",
    )  # fmt: skip

    def __init__(self, *args, **kwargs):
        # The profile page also has the API token form, whose name field is id_name too: a
        # label would point at the other form's input.
        kwargs.setdefault("auto_id", "key_%s")
        super().__init__(*args, **kwargs)
        for name in LIMIT_FIELDS:  # not to be read as the account's
            self.fields[name].label += " (this key)"

    def clean_models(self) -> list[str]:
        names = [n.strip() for n in self.cleaned_data["models"].split(",") if n.strip()]
        if len(names) > MODELS_MAX:
            raise forms.ValidationError(f"At most {MODELS_MAX} models.")
        if any(len(n) > MODEL_NAME_MAX for n in names):
            raise forms.ValidationError(f"A model name has at most {MODEL_NAME_MAX} characters.")
        return names


def _limit_line(label: str, used: int | None, limit: int | None) -> dict | None:
    if limit is None:
        return None
    used = used or 0
    return {"label": label, "used": used, "limit": limit, "left": max(0, limit - used),
            "percent": min(100, round(100 * used / limit)) if limit else 100}  # fmt: skip


def _live_lines(limits: Limits, user_id: int | None = None, key_id: int | None = None,
                tokens_fallback: int = 0) -> list[dict]:  # fmt: skip
    """The limits that apply with what their Redis counters hold now: the user's (shared by
    their keys and the chat) or, with `key_id`, one key's own. Raises RedisError."""
    who = {"user_id": user_id, "key_id": key_id}
    tokens = store.tokens_used_today(**who) if limits.tpd is not None else None
    lines = [
        _limit_line("Tokens today", tokens if tokens is not None else tokens_fallback,
                    limits.tpd),
        _limit_line("Requests in the last minute",
                    store.requests_last_minute(**who) if limits.rpm is not None else 0,
                    limits.rpm),
        _limit_line("Requests in flight",
                    store.in_flight(**who) if limits.concurrent is not None else 0,
                    limits.concurrent),
    ]  # fmt: skip
    return [line for line in lines if line]


def keys_context(request: HttpRequest) -> dict:
    user = request.user
    if not user.has_perm(USE_CHAT):
        return {"gateway_allowed": False}
    usage.drain(wait_s=0.5)
    limits = limits_for(user)
    lines: list[dict] = []
    problem = ""
    per_key = usage.per_key(user)
    keys = list(GatewayKey.objects.filter(user=user))
    for key in keys:
        key.usage = per_key.get(key.pk, {})
        key.limit_lines = []
    try:
        lines = _live_lines(limits, user_id=user.pk, tokens_fallback=usage.today_tokens(user))
        for key in keys:
            if key.revoked_at is None and own_limits(key).any:
                key.limit_lines = _live_lines(own_limits(key), key_id=key.pk)
    except RedisError as exc:
        problem = f"Redis is unreachable, so the live figures are missing: {exc}"
    names = sorted(
        {
            name
            for r in Recipe.objects.only("served_model_name", "model_id")
            for name in r.served_names
        }
    )
    return {
        "gateway_allowed": True,
        "gateway_keys": keys,
        "key_form": KeyForm(),
        "gateway_limits": [line for line in lines if line],
        "gateway_today": usage.today_tokens(user),
        "gateway_problem": problem,
        "gateway_base": request.build_absolute_uri("/v1"),
        "gateway_model_names": names,
    }


@require_POST
def key_create_view(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(USE_CHAT):
        return render_profile(request, status=403)
    form = KeyForm(request.POST)
    if not form.is_valid():
        return render_profile(request, status=400, key_form=form)
    days = form.cleaned_data["expires_days"]
    try:
        key, clear = key_create(
            user=request.user,
            name=form.cleaned_data["name"],
            models=form.cleaned_data["models"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
            limits={name: form.cleaned_data[name] for name in LIMIT_FIELDS},
        )
    except TooManyKeys as exc:
        form.add_error(None, str(exc))
        return render_profile(request, status=400, key_form=form)
    # Post/redirect/get: a reload of the page that shows the key must not create another.
    return redirect_showing_once(
        request, "gateway-keys", new_key=clear, new_key_row={"name": key.name}
    )


@require_POST
def key_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    key = get_object_or_404(GatewayKey, pk=pk, user=request.user)
    try:
        key_revoke(key=key)
    except RedisError:
        messages.error(
            request,
            f"Key “{key.name}” is revoked in the database, but Redis did not answer: running "
            "gateways may accept it for a few minutes more.",
        )
        return redirect("profile")
    messages.success(request, f"Key “{key.name}” revoked: it stops working at once.")
    return redirect("profile")


KEYS = Section(name="gateway-keys", template="gateway/partials/keys.html", context=keys_context,
               order=110)  # fmt: skip
