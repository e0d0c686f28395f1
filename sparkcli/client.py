"""Talking to a SparkPanel over its JSON API: the base URL, the token, the error shape, the
exit codes, and requests with retries (httpx only)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"
API_PREFIX = "/api/v1"
PROFILE_PATH = "/accounts/profile/"
REQUEST_TIMEOUT_S = 30.0
RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_BACKOFF_S = (1.0, 2.0, 4.0)  # three retries; tests set it to zeros

# Exit codes (also in --help).
EXIT_OK = 0
EXIT_JOB_FAILED = 1  # wait: the job failed, was interrupted or cancelled
EXIT_TIMEOUT = 2  # wait: --timeout passed, the job is still active
EXIT_REGRESSION = 3  # compare --max-decode-drop: a decode rate dropped too far
EXIT_API_ERROR = 4  # the panel refused the request (bad token, no such job, invalid input…)
EXIT_UNREACHABLE = 5  # the panel could not be reached
EXIT_USAGE = 64  # bad command line (not 2, which means "timed out")

ACTIVE_STATES = ("queued", "preparing", "running", "cancelling")
FINISHED_STATES = ("done", "cancelled", "interrupted", "failed")


class CliError(Exception):
    """Ends the command with a message on stderr and an exit code."""

    def __init__(self, message: str, code: int, details: Iterable[str] = ()):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = list(details)


class Panel:
    """The panel's API over httpx: one error shape, retries on connect errors and 502/503/504
    (requests that may have reached the panel are retried only when that is safe: reads, and
    queueing with an Idempotency-Key)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        transport: httpx.BaseTransport | None = None,
        backoff: tuple[float, ...] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.url = url
        self.token = token
        self.backoff = RETRY_BACKOFF_S if backoff is None else backoff
        self.sleep = sleep
        headers = {"Accept": "application/json", "User-Agent": "sparkpanel-cli/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.client = httpx.Client(
            base_url=url + API_PREFIX,
            headers=headers,
            timeout=REQUEST_TIMEOUT_S,
            transport=transport,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict | None = None,
        body: Any = None,
        headers: dict | None = None,
    ) -> httpx.Response:
        safe_to_repeat = method == "GET" or bool(headers and headers.get("Idempotency-Key"))
        attempt = 0
        while True:
            try:
                response = self.client.request(
                    method, path, params=params, json=body, headers=headers
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure: Exception | httpx.Response = exc
            except (httpx.ReadTimeout, httpx.ReadError, httpx.RemoteProtocolError) as exc:
                if not safe_to_repeat:
                    raise self._unreachable(exc, sent=True) from None
                failure = exc
            except httpx.HTTPError as exc:
                raise self._unreachable(exc, sent=False) from None
            else:
                retry = response.status_code in RETRY_STATUSES or (
                    response.status_code == 409
                    and _error_code(response) == "idempotency_in_progress"
                )
                if not retry or (response.status_code != 503 and not safe_to_repeat):
                    return self._check(response)
                failure = response
            if attempt >= len(self.backoff):
                if isinstance(failure, httpx.Response):
                    return self._check(failure)
                raise self._unreachable(failure, sent=False)
            self.sleep(self.backoff[attempt])
            attempt += 1

    def _unreachable(self, exc: Exception, *, sent: bool) -> CliError:
        reason = str(exc) or type(exc).__name__
        if sent:
            return CliError(
                f"lost the connection to the panel at {self.url} ({reason}); the request may "
                "have been handled: check with `sparkpanel status`",
                EXIT_UNREACHABLE,
            )
        tries = len(self.backoff) + 1
        return CliError(
            f"could not reach the panel at {self.url} ({reason}; tried {tries} times). "
            "Check --url / SPARKPANEL_URL.",
            EXIT_UNREACHABLE,
        )

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        raise api_error(response, self.url)

    def get(self, path: str, **params) -> Any:
        return self.json(self.request("GET", path, params=params or None))

    def json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise CliError(
                f"the answer from {response.request.url} is not JSON: is {self.url} a SparkPanel?",
                EXIT_API_ERROR,
            ) from None

    def get_text(self, path: str, **params) -> str:
        return self.request("GET", path, params=params or None).text

    def post(self, path: str, body: Any = None, headers: dict | None = None) -> httpx.Response:
        return self.request("POST", path, body={} if body is None else body, headers=headers)


def _error_code(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def api_error(response: httpx.Response, url: str) -> CliError:
    """The panel's {"error": {code, message, fields}} as a CliError (exit 4), with how to fix
    a token problem."""
    status = response.status_code
    try:
        error = response.json()["error"]
        message = str(error.get("message") or f"HTTP {status}")
        fields = error.get("fields") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        if 300 <= status < 400:
            where = response.headers.get("Location", "")
            message = f"HTTP {status} redirect to {where!r}: is {url} a SparkPanel?"
        else:
            snippet = " ".join(response.text.split())[:200]
            message = f"HTTP {status} from {response.request.url}" + (
                f": {snippet}" if snippet else ""
            )
        fields = {}
    details = []
    for name, messages in fields.items():
        for text in messages if isinstance(messages, list) else [messages]:
            details.append(f"  {name}: {text}")
    profile = url + PROFILE_PATH
    if status == 401:
        details.append(
            f"Create a personal API token on your profile page ({profile}) and pass it with "
            "--token or SPARKPANEL_TOKEN (or SPARKPANEL_TOKEN_FILE)."
        )
    elif status == 403:
        details.append(
            "A token acts with its owner's role: ask an admin for a role that allows this, or "
            f"create a token as a user who has one (profile page: {profile})."
        )
    return CliError(message, EXIT_API_ERROR, details)


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    if "://" not in url:
        url = "http://" + url
    return url


def resolve_token(args: argparse.Namespace, environ: dict[str, str]) -> str | None:
    """--token, else --token-file, else SPARKPANEL_TOKEN, else SPARKPANEL_TOKEN_FILE."""
    token = getattr(args, "token", None) or ""
    path = "" if token else getattr(args, "token_file", None) or ""
    if not token and not path:
        token = environ.get("SPARKPANEL_TOKEN", "")
        path = "" if token else environ.get("SPARKPANEL_TOKEN_FILE", "")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read()
        except OSError as exc:
            raise CliError(
                f"cannot read the token file {path}: {exc.strerror}", EXIT_USAGE
            ) from None
    return token.strip() or None
