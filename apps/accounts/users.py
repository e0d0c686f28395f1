"""The Users page: an admin runs the team's accounts in the panel (not only Django admin).

Create (a random password shown once, or a set-password link), change a role, reset a
password, deactivate (sessions, API tokens and gateway keys revoked) and reactivate. Every
change is one audit row with the acting admin (apps/accounts/services.py). A create or reset
answers post/redirect/get: the secret waits in the session for the next GET of the page and
is shown once, never in a URL; a reload repeats the GET, never the POST.
"""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import permission_required
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.views.decorators.http import require_http_methods, require_POST

from apps.accounts.roles import MANAGE_USERS, Role
from apps.accounts.services import (
    UserRefused,
    user_change_role,
    user_create,
    user_deactivate,
    user_reactivate,
    user_reset_password,
    user_role,
)
from apps.audit import services as audit

SHOWN_ONCE = "users_shown_once"
ROLE_CHOICES = [(r.value, r.label) for r in Role]
LIST_LIMIT = 500  # a team's accounts; past it the page says so


def link_days() -> int:
    """How long a set-password link works (Django's PASSWORD_RESET_TIMEOUT), in days."""
    return max(1, round(settings.PASSWORD_RESET_TIMEOUT / 86400))


class UserCreateForm(forms.Form):
    username = forms.CharField(max_length=150, validators=[UnicodeUsernameValidator()])
    email = forms.EmailField(required=False, max_length=254)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Role.MEMBER.value)
    how = forms.ChoiceField(
        label="First password",
        choices=[
            ("link", "a set-password link (they choose it)"),
            ("password", "a random password, shown once"),
        ],
        initial="link",
        widget=forms.RadioSelect,
    )


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


def set_password_link(request: HttpRequest, user) -> str:
    """An absolute link where `user` sets a password: valid until used, until their
    password changes, or for PASSWORD_RESET_TIMEOUT (Django's signed token)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    token = default_token_generator.make_token(user)
    return request.build_absolute_uri(reverse("set-password", args=[uid, token]))


def _redirect_showing(request: HttpRequest, **shown) -> HttpResponse:
    request.session[SHOWN_ONCE] = shown
    return HttpResponseRedirect(reverse("users"))


def _page(request: HttpRequest, form: UserCreateForm | None = None, status: int = 200):
    accounts = get_user_model().objects.order_by("username").prefetch_related("groups")
    rows = [{"user": u, "role": user_role(u)} for u in accounts[:LIST_LIMIT]]
    shown = request.session.pop(SHOWN_ONCE, {})
    context = {
        "current": "users", "rows": rows, "form": form or UserCreateForm(),
        "role_choices": ROLE_CHOICES, "shown": shown, "more": accounts.count() > LIST_LIMIT,
        "limit": LIST_LIMIT, "link_days": link_days(),
    }  # fmt: skip
    response = render(request, "accounts/users.html", context, status=status)
    if shown:
        response["Cache-Control"] = "no-store"  # Back must not bring the secret back
    return response


@require_http_methods(["GET", "POST"])
@permission_required(MANAGE_USERS, raise_exception=True)
def users(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _page(request)
    form = UserCreateForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    data = form.cleaned_data
    link = data["how"] == "link"
    try:
        user, clear = user_create(username=data["username"], role=Role(data["role"]),
                                  email=data["email"], password_link=link)  # fmt: skip
    except ValueError as exc:
        form.add_error("username", str(exc))
        return _page(request, form, status=400)
    except ValidationError as exc:  # a generated password never fails; kept for safety
        form.add_error(None, " ".join(exc.messages))
        return _page(request, form, status=400)
    shown = {"username": user.get_username(), "what": "created"}
    shown["link" if link else "password"] = set_password_link(request, user) if link else clear
    return _redirect_showing(request, **shown)


def _target(pk: int):
    return get_object_or_404(get_user_model(), pk=pk)


@require_POST
@permission_required(MANAGE_USERS, raise_exception=True)
def user_role_change(request: HttpRequest, pk: int) -> HttpResponse:
    user = _target(pk)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Pick one of the roles: admin, operator or member.")
        return HttpResponseRedirect(reverse("users"))
    try:
        user_change_role(user=user, role=Role(form.cleaned_data["role"]))
    except UserRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{user.get_username()} is now {user_role(user).label}.")
    return HttpResponseRedirect(reverse("users"))


@require_POST
@permission_required(MANAGE_USERS, raise_exception=True)
def user_active(request: HttpRequest, pk: int) -> HttpResponse:
    user = _target(pk)
    name = user.get_username()
    if request.POST.get("active") == "1":
        user_reactivate(user=user)
        messages.success(request, f"{name} may sign in again.")
        return HttpResponseRedirect(reverse("users"))
    try:
        what, problems = user_deactivate(user=user, by=request.user)
    except UserRefused as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(reverse("users"))
    messages.success(request, f"{name} is deactivated: signed out everywhere; revoked: {what}.")
    if problems:
        messages.error(request, "Not everything was revoked: " + "; ".join(problems))
    return HttpResponseRedirect(reverse("users"))


@require_POST
@permission_required(MANAGE_USERS, raise_exception=True)
def user_password_reset(request: HttpRequest, pk: int) -> HttpResponse:
    user = _target(pk)
    link = request.POST.get("how", "link") == "link"
    clear = user_reset_password(user=user, link=link)
    shown = {"username": user.get_username(), "what": "reset"}
    shown["link" if link else "password"] = set_password_link(request, user) if link else clear
    return _redirect_showing(request, **shown)


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """Where a set-password link leads (no sign-in needed: the link is the credential).
    Django's own view: the token is checked, then moved out of the URL into the session;
    the password validators apply; the link works once."""

    template_name = "accounts/set_password.html"
    success_url = reverse_lazy("login")
    post_reset_login = False

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "link_days": link_days()}

    def form_valid(self, form):
        response = super().form_valid(form)
        user = form.user
        audit.record("password.set", user, label=user.get_username(), user=user,
                     message="set through a set-password link")  # fmt: skip
        messages.success(self.request, "Your password is set: sign in with it.")
        return response
