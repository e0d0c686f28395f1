"""Who is calling: a personal token (scripts, CI) or the browser's session (the docs page),
and whether their role allows the operation.

The permission is checked during authentication, before the request body is parsed, so a
member posting to an operator's endpoint gets 403 whatever the body holds; `require`
checks it again inside each operation.
"""

from __future__ import annotations

from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from ninja.security.session import SessionAuth

from apps.accounts.roles import VIEW_PANEL
from apps.api.errors import NO_ROLE, ApiError
from apps.api.tokens import token_user
from apps.audit import context as audit_context


def require(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        if not request.user.has_perm(VIEW_PANEL):
            raise ApiError(403, NO_ROLE)
        raise ApiError(403, "Your role does not allow this.", code="forbidden")


class TokenAuth(HttpBearer):
    """`Authorization: Bearer spk_…`. A bad, revoked or deactivated token is a 401 at once
    (it does not fall back to the session)."""

    def __init__(self, permission: str = VIEW_PANEL):
        super().__init__()
        self.permission = permission

    def authenticate(self, request, token: str):
        user = token_user(token)
        if user is None:
            raise AuthenticationError(401, "The API token is invalid or has been revoked.")
        request.user = user
        audit_context.with_user(user)  # the audit rows of this request name them
        require(request, self.permission)
        return user


class PanelSession(SessionAuth):
    """The signed-in browser (Swagger's “Try it out”); unsafe methods need the CSRF token."""

    def __init__(self, permission: str = VIEW_PANEL):
        super().__init__()
        self.permission = permission

    def authenticate(self, request, key):
        user = super().authenticate(request, key)
        if user is not None:
            require(request, self.permission)
        return user


def needs(permission: str) -> list:
    """The `auth=` of an operation that needs more than viewing the panel."""
    return [TokenAuth(permission), PanelSession(permission)]


AUTH = needs(VIEW_PANEL)
