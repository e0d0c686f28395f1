"""One error shape for the whole API: {"error": {"code", "message", "fields"}}.

400 unreadable request, 401 no or bad credentials, 403 the role does not allow it, 404 no
such object, 409 the action conflicts with the current state (host busy, job finished),
422 the input is invalid (with field-level messages), 503 the database is locked or down.
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.http.request import RawPostDataException
from ninja import Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError

from apps.api.parser import BadBody, content_type_problem

log = logging.getLogger(__name__)

CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    422: "invalid",
    429: "throttled",
}


NO_TOKEN = "Send a personal API token: Authorization: Bearer <token>."  # noqa: S105 (a message, not a secret)
NO_ROLE = "This account has no role yet; ask an admin to give it one."
DATABASE_UNAVAILABLE = (
    "The database is busy or unavailable right now, so nothing was saved. Try again in a moment."
)
WWW_AUTHENTICATE = 'Bearer realm="sparkpanel"'


class ErrorBody(Schema):
    code: str
    message: str
    fields: dict[str, list[str]] | None = None


class ErrorOut(Schema):
    error: ErrorBody


# Declared on every operation so the schema tells clients (and schemathesis) what to expect.
ERRORS = {
    400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut,
    503: ErrorOut,
}  # fmt: skip


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, *, code: str | None = None, fields: dict | None = None
    ):
        super().__init__(message)
        self.status = status
        self.code = code or CODES.get(status, "error")
        self.message = message
        self.fields = fields


def body(code: str, message: str, fields: dict | None = None) -> dict:
    return {"error": {"code": code, "message": message, "fields": fields}}


def json_error(status: int, code: str, message: str) -> JsonResponse:
    """The error shape from a plain Django view (outside ninja's handlers)."""
    response = JsonResponse(body(code, message), status=status)
    if status == 401:
        response["WWW-Authenticate"] = WWW_AUTHENTICATE
    return response


def _loc_name(loc) -> str:
    # ninja reports ("body", "payload", "field", 0) or ("query", "limit"): keep what a user
    # typed, i.e. the field path without the transport and the parameter object's name.
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie", "form"):
        parts = parts[1:]
        if len(parts) > 1 and parts[0] in ("payload", "filters", "pagination", "params"):
            parts = parts[1:]
    return ".".join(parts) or "__all__"


def validation_fields(errors: list[dict]) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for error in errors:
        fields.setdefault(_loc_name(error.get("loc", ())), []).append(str(error.get("msg", "")))
    return fields


def install(api) -> None:
    """Replace ninja's default handlers with ones that answer in the one error shape."""

    def respond(request, status: int, code: str, message: str, fields=None):
        response = api.create_response(request, body(code, message, fields), status=status)
        if status == 401:
            response["WWW-Authenticate"] = WWW_AUTHENTICATE
        return response

    def on_api_error(request, exc: ApiError):
        return respond(request, exc.status, exc.code, exc.message, exc.fields)

    def on_validation(request, exc: ValidationError):
        fields = validation_fields(exc.errors)
        return respond(request, 422, "invalid", "The request has invalid fields.", fields)

    def on_http_error(request, exc: HttpError):
        message = str(exc)
        if isinstance(exc, AuthenticationError) and message == "Unauthorized":
            message = NO_TOKEN
        if isinstance(exc.__cause__, BadBody):  # ninja wraps the parser's refusal
            message = str(exc.__cause__)
        return respond(request, exc.status_code, CODES.get(exc.status_code, "error"), message)

    def on_404(request, exc):
        return respond(request, 404, "not_found", str(exc) or "No such object.")

    def on_denied(request, exc):
        return respond(request, 403, "forbidden", str(exc) or "Your role does not allow this.")

    def on_database(request, exc: Exception):
        log.warning("API: database unavailable on %s %s: %s", request.method, request.path, exc)
        response = respond(request, 503, "database_unavailable", DATABASE_UNAVAILABLE)
        response["Retry-After"] = "5"
        return response

    def on_read_stream(request, exc: RawPostDataException):
        # A multipart body was read as a form (by the CSRF or auth check) before the JSON
        # parser could have it: the client sent a form where the API takes JSON.
        message = content_type_problem(request) or "Send the body as JSON."
        return respond(request, 400, "bad_request", message)

    def on_exception(request, exc: Exception):
        log.exception("API error on %s %s", request.method, request.path)
        return respond(
            request, 500, "server_error", "Internal error; the panel's log has the details."
        )

    api.add_exception_handler(Exception, on_exception)
    api.add_exception_handler(RawPostDataException, on_read_stream)
    api.add_exception_handler(OperationalError, on_database)
    api.add_exception_handler(InterfaceError, on_database)
    api.add_exception_handler(Http404, on_404)
    api.add_exception_handler(PermissionDenied, on_denied)
    api.add_exception_handler(HttpError, on_http_error)
    api.add_exception_handler(ValidationError, on_validation)
    api.add_exception_handler(ApiError, on_api_error)
