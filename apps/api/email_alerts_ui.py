"""The profile page's "E-mail alerts" section: which events reach you by e-mail, and a
button that sends a test message now (registered in apps/api/profile_sections.py)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from apps.accounts.profile import render_profile
from apps.api import email_alerts
from apps.api.models import EmailAlerts


class EmailAlertsForm(forms.Form):
    events = forms.MultipleChoiceField(
        choices=EmailAlerts.Event.choices, widget=forms.CheckboxSelectMultiple, required=False
    )


def email_alerts_context(request: HttpRequest) -> dict:
    row = EmailAlerts.objects.filter(user=request.user).first()
    chosen = row.events if row else []
    return {
        "email_alerts_form": EmailAlertsForm(initial={"events": chosen}),
        "email_alerts_address": request.user.email,
    }


@require_POST
def email_alerts_save(request: HttpRequest) -> HttpResponse:
    form = EmailAlertsForm(request.POST)
    if not form.is_valid():
        return render_profile(request, status=400, email_alerts_form=form)
    events = [e for e, _ in EmailAlerts.Event.choices if e in form.cleaned_data["events"]]
    EmailAlerts.objects.update_or_create(user=request.user, defaults={"events": events})
    if events and not request.user.email:
        messages.warning(request, "Saved — but your account has no e-mail address yet: an "
                         "admin sets it in Django admin.")  # fmt: skip
    else:
        messages.success(request, f"E-mail alerts saved ({len(events)} chosen).")
    return redirect("profile")


@require_POST
def email_alerts_test(request: HttpRequest) -> HttpResponse:
    outcome = email_alerts.send_test(request.user)
    (messages.success if outcome.startswith("Sent") else messages.error)(request, outcome)
    return redirect("profile")
