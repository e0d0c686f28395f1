"""Changing your own password (Django's PasswordChangeView, in the panel's look).

Django keeps the session that changed the password (update_session_auth_hash) and every
other session of the account stops being valid at its next request, because a session
stores a hash of the password it signed in with.

Two additions (issue 38):

- **Wrong current passwords are limited like sign-in** (`LOGIN_FAILURE_LIMIT`, 5, within
  `LOGIN_COOLOFF_MINUTES`, 15): otherwise a stolen session could guess its way to the
  password itself. After the limit the page says so, checks no password at all (the right
  one neither) for the cool-off, and the audit log gets a `password.lock` row.
- **"Also revoke my API tokens and gateway keys"**, checked by default: a password that
  leaked may have been used to make them. The apps that own them revoke them through their
  own services (apps/accounts/signals.py: accounts imports neither).

Why a counter in Redis (Django's "shared" cache), not axes: axes counts per username *and
address* and shares its rows with the sign-in lockout. Whoever holds a stolen session can
change address at will, so this limit is per account; and five mistyped current passwords
should not lock the owner's sign-in. Redis is what every web process sees alike (the
"default" cache is each process's own memory), and the key ends in a digest of the
account's session hash, which changes with the password: a successful change (or an
admin's reset) starts the count again. Redis unreachable: the page checks no password and
says so (a limit that cannot count must not let guesses through).
"""

from __future__ import annotations

import hashlib

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.core.cache import caches
from django.urls import reverse_lazy
from redis import RedisError

from apps.accounts.services import user_revoke_credentials
from apps.audit import services as audit

REVOKE_HELP = (
    "Recommended when someone else may know the old password: API tokens and gateway keys "
    "are not signed out by a password change, and whoever had it may have made some. "
    "Revoked ones stop working at once (scripts and tools using them need new ones); "
    "unticked, they keep working."
)


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    revoke_credentials = forms.BooleanField(
        required=False,
        initial=True,
        label="Also revoke my API tokens and gateway keys",
        help_text=REVOKE_HELP,
    )

    def __init__(self, *args, user, **kwargs):
        # The user by keyword (the view passes it so): like every form of the panel, this
        # one takes its data first (tests/security/test_fuzz.py builds each one that way).
        super().__init__(user, *args, **kwargs)


class Guesses:
    """Wrong current passwords of one account, counted in Redis for the cool-off."""

    def __init__(self, user):
        self.limit = settings.AXES_FAILURE_LIMIT
        self.window_s = max(1, int(settings.AXES_COOLOFF_TIME.total_seconds()))
        # The session hash changes with the password: a new password, a new count.
        marker = hashlib.sha256(user.get_session_auth_hash().encode()).hexdigest()[:16]
        self.key = f"password-guesses:{user.pk}:{marker}"
        self.cache = caches["shared"]

    def locked(self) -> bool:
        return (self.cache.get(self.key) or 0) >= self.limit

    def wrong(self) -> int:
        """One more wrong guess; how many there are now. The limit reached, the cool-off
        runs from this guess (as sign-in's does from the last failure)."""
        self.cache.add(self.key, 0, timeout=self.window_s)  # the window opens at the first
        try:
            count = self.cache.incr(self.key)
        except ValueError:  # expired between the two calls: this guess opens a new window
            self.cache.set(self.key, 1, timeout=self.window_s)
            count = 1
        if count >= self.limit:
            self.cache.touch(self.key, timeout=self.window_s)
        return count

    def minutes(self) -> int:
        return max(1, round(self.window_s / 60))


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "accounts/password_change.html"
    form_class = PasswordChangeForm
    success_url = reverse_lazy("profile")
    extra_context = {"current": "profile"}

    def post(self, request, *args, **kwargs):
        guesses = Guesses(request.user)
        try:
            if guesses.locked():
                return self._refused(self._locked_words(guesses), status=429)
        except RedisError:
            return self._refused(
                "The panel cannot count wrong passwords right now (Redis does not answer), so "
                "it checks none: try again in a minute.",
                status=503,
            )
        form = self.get_form()
        if form.is_valid():
            return self.form_valid(form)
        if form.has_error("old_password", code="password_incorrect"):
            try:
                count = guesses.wrong()
            except RedisError:
                count = 0
            if count >= guesses.limit:
                audit.record(
                    "password.lock", request.user, label=request.user.get_username(),
                    message=f"{count} wrong current passwords on the password page: changing "
                            f"the password is locked for {guesses.minutes()} min",
                )  # fmt: skip
                return self._refused(self._locked_words(guesses), status=429)
        return self.form_invalid(form)

    def _locked_words(self, guesses: Guesses) -> str:
        return (
            f"Too many wrong current passwords: changing your password is locked for "
            f"{guesses.minutes()} minutes. No password is checked until then, the right one "
            "neither. If you did not try this, someone may be using your session: sign out "
            "everywhere by asking an admin to reset your password."
        )

    def _refused(self, words: str, status: int):
        """The page with a fresh form and `words`: nothing posted was checked."""
        context = self.get_context_data(form=self.form_class(user=self.request.user))
        context["refused"] = words
        return self.render_to_response(context, status=status)

    def form_valid(self, form):
        response = super().form_valid(form)
        user = self.request.user
        said = (
            "Password changed. This browser stays signed in; your other sessions were signed out."
        )
        if form.cleaned_data["revoke_credentials"]:
            what, problems = user_revoke_credentials(user)
            audit.record("password.change", user, label=user.get_username(),
                         message=f"API tokens and gateway keys revoked: {what}")  # fmt: skip
            said += f" API tokens and gateway keys revoked: {what}."
            if problems:
                messages.error(self.request, "Not everything was revoked: " + "; ".join(problems)
                               + ". Check your account page.")  # fmt: skip
        else:
            audit.record("password.change", user, label=user.get_username(),
                         message="API tokens and gateway keys kept")  # fmt: skip
            said += " Your API tokens and gateway keys keep working."
        messages.success(self.request, said)
        return response
