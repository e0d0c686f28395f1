"""The API's sections of the profile page (apps/accounts/profile.py): "API tokens" (its form
and views, here) and "Webhooks" (apps/api/webhooks/ui.py), registered by ApiConfig.ready().
Their URLs: apps/api/profile_urls.py; their templates: templates/api/partials/."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from apps.accounts.profile import Section, redirect_showing_once, register, render_profile
from apps.api.email_alerts_ui import email_alerts_context
from apps.api.models import ApiToken
from apps.api.tokens import token_create, token_revoke
from apps.api.webhooks.ui import webhook_context


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="What it is for, e.g. “nightly CI on the build server”."
    )


def tokens_context(request: HttpRequest) -> dict:
    return {"tokens": ApiToken.objects.filter(user=request.user), "token_form": TokenForm()}


@require_POST
def token_create_view(request: HttpRequest) -> HttpResponse:
    """A POST to the profile page: create a token, then show it once on the page the browser
    is sent to (it is never stored in clear; a reload shows it no more, and creates none)."""
    form = TokenForm(request.POST)
    if not form.is_valid():
        return render_profile(request, status=400, token_form=form)
    token, clear = token_create(user=request.user, name=form.cleaned_data["name"])
    return redirect_showing_once(
        request, "tokens", new_token=clear, new_token_row={"name": token.name}
    )


@require_POST
def token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    token_revoke(token=token)
    messages.success(request, f"Token “{token.name}” revoked: it stops working at once.")
    return redirect("profile")


TOKENS = Section(
    name="tokens",
    template="api/partials/tokens.html",
    context=tokens_context,
    order=100,
    post=token_create_view,
)
WEBHOOKS = Section(
    name="webhooks", template="api/partials/webhooks.html", context=webhook_context, order=200
)
EMAIL_ALERTS = Section(
    name="email-alerts",
    template="api/partials/email_alerts.html",
    context=email_alerts_context,
    order=250,
)


def register_sections() -> None:
    """ApiConfig.ready(): the tokens card, the webhooks card, the e-mail alerts card."""
    register(TOKENS)
    register(WEBHOOKS)
    register(EMAIL_ALERTS)
