"""The profile page (its sections: apps/accounts/profile.py): who you are and your role here;
apps above add theirs (the API: tokens and webhooks, apps/api/profile_sections.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.http import require_http_methods

from apps.accounts.profile import (
    Section,
    post_handler,
    register,
    render_profile,
    take_shown_once,
)
from apps.accounts.roles import CAPABILITIES, perm


def account_context(request: HttpRequest) -> dict:
    """The first card: what the user's role allows."""
    user = request.user
    return {
        "capabilities": [text for code, text in CAPABILITIES.items() if user.has_perm(perm(code))]
    }


ACCOUNT_SECTION = Section(
    name="account", template="accounts/partials/account.html", context=account_context, order=0
)


def register_sections() -> None:
    """The accounts app's own sections (AccountsConfig.ready)."""
    register(ACCOUNT_SECTION)


@require_http_methods(["GET", "POST"])
def profile(request: HttpRequest) -> HttpResponse:
    """GET shows the page, with what a create just before left to show once (a new token,
    key or webhook secret); a POST goes to the section that answers the page's own form
    (the API's token form)."""
    if request.method == "GET":
        shown = take_shown_once(request)
        response = render_profile(request, **shown)
        if shown:
            response["Cache-Control"] = "no-store"  # Back must not bring the secret back
        return response
    handler = post_handler()
    if handler is None:
        return HttpResponseNotAllowed(["GET"])
    return handler(request)
