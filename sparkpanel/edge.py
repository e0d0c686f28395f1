"""The ASGI edge: what every request and socket passes before Django or a consumer sees it.

- `BodyLimit` (HTTP): a body over the limit is refused with 413 before it is read, by its
  Content-Length up front, and by counting the bytes of a streamed (chunked) body, cut
  off as soon as the count passes the limit. Nothing over the limit is buffered, spooled
  to disk or parsed, and this happens before authentication.
- `OriginCheck` (WebSocket): the full Origin (scheme, host and port) must be the origin
  the socket was opened on (its Host, checked against ALLOWED_HOSTS) or one of
  CSRF_TRUSTED_ORIGINS: the rule Django's CSRF check applies to HTTP, by the same code.
- `KnownSocketPaths` (WebSocket): a path no route matches is closed with 4404 and one log
  line, instead of the router's ValueError (a 500 and a traceback).
- `ParseLimits` (Django middleware): Django's own limits (DATA_UPLOAD_MAX_MEMORY_SIZE,
  DATA_UPLOAD_MAX_NUMBER_FIELDS/FILES) and malformed multipart bodies are checked once, up
  front, for every request: 413 or 400 with one log line, instead of a 500 (the API) or a
  400 with a traceback (forms), wherever a view happens to read the body.
- `SignedInConnections` (Django middleware) and `mark_on_success` (the gateway, through
  sparkpanel/asgi.py): tell the server's protocol that a connection carried credentials
  the panel accepted, so that it no longer counts against the per-address cap on
  unauthenticated connections (sparkpanel/httpserver.py).

Limits are settings: REQUEST_BODY_MAX_BYTES for every path, UPLOAD_BODY_MAX_BYTES for the
views that take file uploads (UPLOAD_URL_NAMES).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError

from sparkpanel.httpserver import CONNECTION_EXTENSION

log = logging.getLogger(__name__)

# Views that take file uploads: the recipe wizard (config.json and hf_quant_config.json,
# 2 MB each, plus pasted text) and the YAML import (a 1 MB file, or pasted text).
UPLOAD_URL_NAMES = ("recipe-wizard", "recipe-import", "benchmark-import")
CLOSE_NO_ROUTE = 4404
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
BODYLESS_METHODS = ("GET", "HEAD", "OPTIONS", "TRACE")


def _megabytes(limit: int) -> str:
    return f"{limit / 1_000_000:.1f} MB"


def _is_api(path: str) -> bool:
    return path.startswith("/api/")


def _error_body(code: str, message: str) -> dict:
    from apps.api.errors import body

    return body(code, message)


def too_large_message(limit: int) -> str:
    return f"The request body is larger than {_megabytes(limit)}; nothing was read or saved."


# --- HTTP: the body limit -----------------------------------------------------------------


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def _app_path(scope) -> str:
    path = scope.get("path", "")
    root = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path or "/"


class BodyLimit:
    """Pure ASGI middleware around the HTTP application: see the module docstring."""

    def __init__(self, app):
        self.app = app
        self._upload_paths: frozenset[str] | None = None

    def upload_paths(self) -> frozenset[str]:
        if self._upload_paths is None:
            from django.urls import reverse

            self._upload_paths = frozenset(reverse(name) for name in UPLOAD_URL_NAMES)
        return self._upload_paths

    def limit_for(self, path: str) -> int:
        if path in self.upload_paths():
            return max(settings.UPLOAD_BODY_MAX_BYTES, settings.REQUEST_BODY_MAX_BYTES)
        return settings.REQUEST_BODY_MAX_BYTES

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = _app_path(scope)
        limit = self.limit_for(path)
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = None  # the server refuses a malformed Content-Length itself
            if length is not None and length > limit:
                log.warning(
                    "Refused %s %s: Content-Length %d is over the %d-byte limit",
                    scope.get("method"), path, length, limit,
                )  # fmt: skip
                return await self.refuse(path, limit, send)

        received = 0
        refused: str | None = None  # why the body was cut off: "too_large" or "too_slow"
        body_done = False
        started = False
        deadline = asyncio.get_running_loop().time() + settings.REQUEST_BODY_TIMEOUT

        async def limited_receive():
            nonlocal received, refused, body_done
            if refused:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()  # after the body: only the disconnect is left
            left = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0))
            except TimeoutError:
                refused = "too_slow"
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > limit:
                    # The application sees a client that went away (Django drops what it
                    # read); the 413 is answered below, and nothing more is read.
                    refused = "too_large"
                    return {"type": "http.disconnect"}
            return message

        async def tracked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, tracked_send)
        if refused == "too_large" and not started:
            log.warning(
                "Refused %s %s: the streamed body passed the %d-byte limit",
                scope.get("method"), path, limit,
            )  # fmt: skip
            await self.refuse(path, limit, send)
        elif refused == "too_slow" and not started:
            seconds = settings.REQUEST_BODY_TIMEOUT
            log.warning("Refused %s %s: the body did not arrive within %s s",
                        scope.get("method"), path, seconds)  # fmt: skip
            message = f"The request body did not arrive within {seconds} s."
            await _send_error(path, 408, "timeout", message, send)

    @staticmethod
    async def refuse(path: str, limit: int, send) -> None:
        await _send_error(path, 413, "too_large", too_large_message(limit), send)


async def _send_error(path: str, status: int, code: str, message: str, send) -> None:
    """A short answer that ends the connection (the rest of the body is never read)."""
    if _is_api(path):
        content = json.dumps(_error_body(code, message)).encode()
        content_type = b"application/json"
    else:
        content = message.encode() + b"\n"
        content_type = b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(content)).encode()),
                (b"connection", b"close"),
                (b"x-content-type-options", b"nosniff"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})


# --- Django: its own parse limits, checked up front -----------------------------------------


class ParseLimits:
    """Reads the request's body (form data: parsed, with Django's field and size limits)
    before any other middleware or view, so an over-limit or malformed body is one clean
    answer everywhere: 413 for too large, 400 for too many fields or a broken multipart."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in BODYLESS_METHODS:
            problem = self._parse(request)
            if problem is not None:
                return problem
        return self.get_response(request)

    @staticmethod
    def _parse(request):
        try:
            if request.content_type in FORM_TYPES:
                request.POST  # noqa: B018 (parses the form, files included, with Django's limits)
            else:
                request.body  # noqa: B018 (checks DATA_UPLOAD_MAX_MEMORY_SIZE)
        except RequestDataTooBig:
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            log.warning("Refused %s %s: form data over %d bytes", request.method, request.path,
                        limit)  # fmt: skip
            return _answer(request, 413, "too_large", too_large_message(limit))
        except TooManyFieldsSent:
            limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            log.warning("Refused %s %s: over %d form fields", request.method, request.path,
                        limit)  # fmt: skip
            return _answer(request, 400, "bad_request", f"More than {limit} form fields.")
        except TooManyFilesSent:
            limit = settings.DATA_UPLOAD_MAX_NUMBER_FILES
            log.warning("Refused %s %s: over %d files", request.method, request.path, limit)
            return _answer(request, 400, "bad_request", f"More than {limit} files.")
        except MultiPartParserError as exc:
            log.warning("Refused %s %s: unreadable multipart body: %s", request.method,
                        request.path, exc)  # fmt: skip
            return _answer(request, 400, "bad_request", "The form data could not be read.")
        return None


def _answer(request, status: int, code: str, message: str):
    if _is_api(request.path_info):
        return JsonResponse(_error_body(code, message), status=status)
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


# --- Connections that carried accepted credentials ----------------------------------------


def connection_of(scope):
    """The server's mark for the request's connection (sparkpanel/httpserver.py's
    `ConnectionMark`), or None (another server, a test client)."""
    if not scope:
        return None
    return scope.get("extensions", {}).get(CONNECTION_EXTENSION)


class SignedInConnections:
    """Django middleware: a request whose user is signed in at the end (a session, or an API
    token that the API's authentication accepted and made `request.user`) marks its
    connection as authenticated; a failed sign-in or an anonymous page does not. Once per
    connection: later requests on it only read a flag."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        connection = connection_of(getattr(request, "scope", None))
        if connection is not None and not connection.authenticated:
            user = getattr(request, "user", None)
            if user is not None and user.is_authenticated:
                connection.mark_authenticated()
        return response


def mark_on_success(send, connection):
    """`send` for a gateway request on a connection not yet authenticated: a 2xx answer marks
    it. The gateway answers 2xx only to a key it admitted (the models list, a relayed
    answer); its refusals (401, 400, 404, 408, 413, ...) leave the connection as it was."""

    async def marking_send(message):
        if message["type"] == "http.response.start" and 200 <= message["status"] < 300:
            connection.mark_authenticated()
        await send(message)

    return marking_send


# --- WebSocket: full-origin check and unknown paths ------------------------------------------


def origin_allowed(scope) -> bool:
    """Whether a socket's Origin passes Django's CSRF origin rule: exactly the origin the
    socket was opened on (scheme from ws/wss, Host checked against ALLOWED_HOSTS), or one
    of CSRF_TRUSTED_ORIGINS (wildcard subdomains as Django reads them)."""
    from django.core.handlers.asgi import ASGIRequest
    from django.middleware.csrf import CsrfViewMiddleware

    if _header(scope, b"origin") is None:
        return False
    scheme = {"ws": "http", "wss": "https"}.get(scope.get("scheme", "ws"), scope.get("scheme"))
    http_scope = {**scope, "type": "http", "method": "GET", "scheme": scheme}
    try:
        request = ASGIRequest(http_scope, io.BytesIO())
    except UnicodeDecodeError:
        return False
    # Django's own check (the one CsrfViewMiddleware runs for an unsafe HTTP request).
    return CsrfViewMiddleware(lambda r: None)._origin_verified(request)


class OriginCheck:
    """Refuses (HTTP 403 at the handshake) a socket whose Origin fails `origin_allowed`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            from channels.security.websocket import WebsocketDenier

            origin = (_header(scope, b"origin") or b"(none)").decode("latin1")
            log.warning("Refused a WebSocket to %s from origin %s", scope.get("path"), origin)
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)


class KnownSocketPaths:
    """Closes (4404) a socket whose path no route in `patterns` matches."""

    def __init__(self, app, patterns):
        self.app = app
        self.patterns = list(patterns)

    def known(self, scope) -> bool:
        path = _app_path(scope).lstrip("/")
        return any(pattern.pattern.match(path) for pattern in self.patterns)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not self.known(scope):
            log.warning("Closed a WebSocket to %s: no such socket", scope.get("path"))
            message = await receive()
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.close", "code": CLOSE_NO_ROUTE})
            return None
        return await self.app(scope, receive, send)
