"""Changing your own password (Django's PasswordChangeView, in the panel's look).

Django keeps the session that changed the password (update_session_auth_hash) and every
other session of the account stops being valid at its next request, because a session
stores a hash of the password it signed in with.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.urls import reverse_lazy


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "accounts/password_change.html"
    success_url = reverse_lazy("profile")
    extra_context = {"current": "profile"}

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(
            self.request,
            "Password changed. This browser stays signed in; your other sessions were signed out.",
        )
        return response
