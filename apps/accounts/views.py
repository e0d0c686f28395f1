"""The profile page: who you are, your role, your API tokens (and webhooks)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.roles import CAPABILITIES, perm
from apps.api.models import ApiToken
from apps.api.tokens import token_create, token_revoke


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="What it is for, e.g. “nightly CI on the build server”."
    )


def _context(request: HttpRequest, **extra) -> dict:
    from apps.api.webhooks import webhook_context

    user = request.user
    return {
        "tokens": ApiToken.objects.filter(user=user),
        "form": extra.pop("form", None) or TokenForm(),
        "capabilities": [text for code, text in CAPABILITIES.items() if user.has_perm(perm(code))],
        "current": "profile",
        **webhook_context(request),
        **extra,
    }


@require_http_methods(["GET", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    """GET shows the page; POST creates a token and shows it this once (it is never stored
    in clear, so a reload cannot show it again)."""
    if request.method == "GET":
        return render(request, "accounts/profile.html", _context(request))
    form = TokenForm(request.POST)
    if not form.is_valid():
        return render(request, "accounts/profile.html", _context(request, form=form), status=400)
    token, clear = token_create(user=request.user, name=form.cleaned_data["name"])
    response = render(
        request, "accounts/profile.html", _context(request, new_token=clear, new_token_row=token)
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
def token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked: it stops working at once.")
    return redirect("profile")
