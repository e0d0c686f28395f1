"""Who is acting, for the audit rows of this request or task.

The middleware notes each request's address, its user and whether it came through the
API or Django admin; a service that records an action reads it from here, so the rows
say where an action came from without every service taking a request. Workers and the
host agent act as "the panel itself" or "the memory watchdog" (`acting_as`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    user: object | None = None
    address: str | None = None
    source: str = "system"
    name: str = ""  # who, when there is no panel user (the machine's user at a shell)


_ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("audit_actor", default=None)
_NOBODY = Actor()
_QUIET: contextvars.ContextVar[bool] = contextvars.ContextVar("audit_quiet", default=False)


def current() -> Actor:
    return _ACTOR.get() or _NOBODY


@contextlib.contextmanager
def acting_as(actor: Actor):
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def command_line(command: str):
    """A manage.py command's rows: the machine's user who ran it, not "the panel itself"
    (`manage.py createuser` is how the first accounts are made)."""
    import getpass

    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        who = f"uid {os.getuid()}"
    return acting_as(Actor(source="command", name=f"{who} (manage.py {command})"[:150]))


def is_quiet() -> bool:
    return _QUIET.get()


@contextlib.contextmanager
def quiet():
    """A service that records its action as one row: the model signals it sets off on
    the way (a user saved, then put in a group) add none of their own."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


def _source(path: str) -> str:
    if path.startswith("/api/"):
        return "api"
    if path.startswith("/admin/"):
        return "admin"
    return "web"


class AuditContextMiddleware:
    """After authentication: the request's user (an API token's user is added when the
    API authenticates it, apps/api/auth.py) and REMOTE_ADDR — never a forwarding header
    (behind a proxy uvicorn sets REMOTE_ADDR from the trusted one, docs/deploy.md)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        actor = Actor(
            user=user if user is not None and user.is_authenticated else None,
            address=request.META.get("REMOTE_ADDR") or None,
            source=_source(request.path),
        )
        with acting_as(actor):
            return self.get_response(request)


def with_user(user) -> None:
    """The API authenticated `user` for this request: later rows name them."""
    actor = current()
    if actor.user is None and user is not None:
        _ACTOR.set(Actor(user=user, address=actor.address, source=actor.source))
