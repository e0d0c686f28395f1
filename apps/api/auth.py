"""Who is calling: a personal token (scripts, CI) or the browser's session (the docs page).

Every endpoint then checks the same permissions as the pages (`require`).
"""

from __future__ import annotations

from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from ninja.security.session import SessionAuth

from apps.accounts.roles import VIEW_PANEL
from apps.api.errors import ApiError
from apps.api.tokens import token_user


class TokenAuth(HttpBearer):
    """`Authorization: Bearer spk_…`. A bad, revoked or deactivated token is a 401 at once
    (it does not fall back to the session)."""

    def authenticate(self, request, token: str):
        user = token_user(token)
        if user is None:
            raise AuthenticationError(401, "The API token is invalid or has been revoked.")
        request.user = user
        return user


class PanelSession(SessionAuth):
    """The signed-in browser (Swagger's “Try it out”); unsafe methods need the CSRF token."""


def require(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        if not request.user.has_perm(VIEW_PANEL):
            raise ApiError(403, "This account has no role yet; ask an admin to give it one.")
        raise ApiError(403, "Your role does not allow this.", code="forbidden")


AUTH = [TokenAuth(), PanelSession()]
