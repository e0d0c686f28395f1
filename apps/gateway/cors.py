"""CORS for /v1: which browser pages may call the gateway with a person's own key.

Browser clients such as Open WebUI's per-user Direct Connections call /v1 from their own
origin with `Authorization: Bearer spg_…`; the browser first sends a preflight (OPTIONS with
`Access-Control-Request-Method`) and reads an answer only when the response names the
page's origin. The gateway answers for the origins admins listed (AllowedOrigin, held in
the route table) and for no other: no `*`, no credentials mode (keys go in a header, never
a cookie or a URL). Pure functions over ASGI headers; apps/gateway/asgi.py calls them.
"""

from __future__ import annotations

import re

ALLOW_METHODS = b"GET, POST, OPTIONS"
# Headers a page may send: what the OpenAI SDKs and Open WebUI send, or any well-formed
# header names the preflight asks for (the key is what authorizes, not the headers).
DEFAULT_ALLOW_HEADERS = b"authorization, content-type"
EXPOSE_HEADERS = b"retry-after, content-type"
MAX_AGE_S = b"600"
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
MAX_ASKED_HEADERS = 32


def allowed_headers(asked: str | None) -> bytes:
    """Access-Control-Allow-Headers for a preflight's Access-Control-Request-Headers: the
    names it asks for when every one is a header name (at most 32), else the defaults."""
    if not asked:
        return DEFAULT_ALLOW_HEADERS
    names = [n.strip().lower() for n in asked.split(",") if n.strip()]
    if not names or len(names) > MAX_ASKED_HEADERS or not all(_TOKEN.match(n) for n in names):
        return DEFAULT_ALLOW_HEADERS
    return ", ".join(dict.fromkeys(names)).encode("latin-1")


def answer_headers(origin: str) -> list[tuple[bytes, bytes]]:
    """What every answer to an allowed origin carries (errors too: a page reads why)."""
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-expose-headers", EXPOSE_HEADERS),
        (b"vary", b"Origin"),
    ]


def preflight_headers(origin: str, asked_headers: str | None) -> list[tuple[bytes, bytes]]:
    return [
        (b"access-control-allow-origin", origin.encode("latin-1")),
        (b"access-control-allow-methods", ALLOW_METHODS),
        (b"access-control-allow-headers", allowed_headers(asked_headers)),
        (b"access-control-max-age", MAX_AGE_S),
        (b"vary", b"Origin"),
        (b"content-length", b"0"),
    ]
