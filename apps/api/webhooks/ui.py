"""The profile page's Webhooks section (registered in apps/api/profile_sections.py): the
form that adds a webhook, the section's context, and the add / delete / send-test views
(URLs in apps/api/profile_urls.py, template api/partials/webhooks.html)."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.accounts.profile import redirect_showing_once, render_profile
from apps.api import egress
from apps.api.models import Webhook, WebhookDelivery
from apps.api.webhooks import formats
from apps.api.webhooks.delivery import allowed_networks, deliver_to, retry_delays
from apps.api.webhooks.payloads import JOB_FINISHED, PING, ping_payload
from apps.api.webhooks.signing import new_secret

MAX_URL_LENGTH = 500
MAX_WEBHOOKS_PER_USER = 10
LOG_SHOWN = 20  # deliveries listed on the profile page


class WebhookForm(forms.Form):
    url = forms.URLField(
        label="URL",
        max_length=MAX_URL_LENGTH,
        assume_scheme="https",
        help_text=(
            "http:// or https:// to a public address (port 80, 443 or 1024–65535); the "
            "panel's worker machine POSTs here. LAN receivers need their network allowed "
            "by an admin (WEBHOOK_ALLOWED_NETWORKS)."
        ),
    )
    format = forms.ChoiceField(
        choices=formats.CHOICES,
        initial=formats.GENERIC,
        required=False,  # left out: the signed JSON, as before formats existed
        help_text=(
            "SparkPanel JSON is signed (verify X-SparkPanel-Signature); Slack, Discord, Teams "
            "and ntfy get a message they show as it is: paste their webhook or topic URL."
        ),
    )
    events = forms.MultipleChoiceField(
        choices=Webhook.Event.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=[JOB_FINISHED],
        error_messages={"required": "Choose at least one event."},
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise forms.ValidationError("Only http:// and https:// URLs.")
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise forms.ValidationError(
                "No credentials in the URL: verify the signature on the receiving side instead."
            )
        if not parts.hostname:
            raise forms.ValidationError("The URL needs a host.")
        try:
            # A name that does not resolve here may resolve from the worker: each delivery
            # checks again anyway.
            egress.resolve_checked(egress.check_url(str(httpx.URL(url))), allowed_networks())
        except egress.Refused as exc:
            raise forms.ValidationError(f"Refused: {exc.reason}.") from None
        except egress.Unresolved:
            pass
        except httpx.InvalidURL:
            raise forms.ValidationError("Enter a valid URL.") from None
        return url

    def clean(self):
        cleaned = super().clean()
        if self.user is not None and (
            Webhook.objects.filter(user=self.user).count() >= MAX_WEBHOOKS_PER_USER
        ):
            raise forms.ValidationError(
                f"At most {MAX_WEBHOOKS_PER_USER} webhooks each: delete one first."
            )
        return cleaned


def webhook_context(request: HttpRequest) -> dict:
    """The profile page's webhooks card: the user's webhooks, their latest deliveries and
    the form to add one."""
    user = request.user
    return {
        # The secrets stay encrypted: the page never shows them.
        "webhooks": Webhook.objects.filter(user=user).defer("secret"),
        "webhook_deliveries": WebhookDelivery.objects.filter(webhook__user=user)
        .select_related("webhook")
        .defer("webhook__secret")
        .order_by("-created_at", "-pk")[:LOG_SHOWN],
        "webhook_form": WebhookForm(),
        "webhook_retry_delays": [f"{d:g}" for d in retry_delays()],
    }


@require_POST
def webhook_add(request: HttpRequest) -> HttpResponse:
    """Create a webhook, then show its secret once on the page the browser is sent to."""
    form = WebhookForm(request.POST, user=request.user)
    if not form.is_valid():
        return render_profile(request, status=400, webhook_form=form)
    hook = Webhook.objects.create(
        user=request.user,
        url=form.cleaned_data["url"],
        secret=new_secret(),
        events=[e for e, _ in Webhook.Event.choices if e in form.cleaned_data["events"]],
        format=form.cleaned_data["format"] or formats.GENERIC,
    )
    return redirect_showing_once(
        request, "webhooks", new_webhook={"url": hook.url}, new_webhook_secret=hook.secret
    )


@require_POST
def webhook_delete(request: HttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(Webhook, pk=pk, user=request.user)
    hook.delete()
    messages.success(request, f"Webhook to {hook.url} deleted, with its delivery log.")
    return redirect(reverse("profile") + "#webhooks")


@require_POST
def webhook_test(request: HttpRequest, pk: int) -> HttpResponse:
    """Queue a `ping` delivery to this webhook, whatever events it subscribes to."""
    hook = get_object_or_404(Webhook, pk=pk, user=request.user)
    deliver_to(hook, PING, ping_payload(hook))
    messages.success(request, "Test ping queued: its result appears in the delivery log below.")
    return redirect(reverse("profile") + "#webhooks")
