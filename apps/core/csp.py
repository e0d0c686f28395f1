"""The Content-Security-Policy header, on every response the panel gives (Django 5.2 has
no CSP support of its own; 6.0's would replace this module).

The pages run no inline script and carry no style attributes: scripts are the files in
static/ (htmx, events.js, the charts, chat), parameters travel in data- attributes, a
confirmation is `data-confirm` (events.js), and bars and gauges use the `pct-N` width
classes. So the policy allows only the panel's own origin:

- scripts, styles, fonts, frames: `'self'` only, no `'unsafe-inline'`, no `'unsafe-eval'`
  (htmx's eval features, `hx-on` and trigger filters, are unused and switched off in
  `_base.html`'s htmx-config, as are its injected indicator styles);
- images: `'self'` and `data:` (Swagger UI's and uPlot's icons are data: URIs);
- connections: `'self'` and the exact WebSocket origin of the request (`ws://host:port`,
  `wss://` behind HTTPS) for the live events and chat sockets;
- no plugins (`object-src 'none'`), no framing (`frame-ancestors 'none'`, as X-Frame-Options
  DENY), `<base>` and form targets only on the panel.

A response that already has the header (a view that needs another policy) keeps it.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

HEADER = "Content-Security-Policy"

DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "frame-src": "'none'",
    "frame-ancestors": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
}


def socket_origin(request: HttpRequest) -> str | None:
    """ws://host:port (wss:// when the request came over HTTPS) of this request, or None
    when the Host header is not one of ALLOWED_HOSTS (Django answers 400 then anyway)."""
    try:
        host = request.get_host()
    except DisallowedHost:
        return None
    return ("wss://" if request.is_secure() else "ws://") + host


def policy(request: HttpRequest) -> str:
    directives = dict(DIRECTIVES)
    origin = socket_origin(request)
    if origin:
        directives["connect-src"] += " " + origin
    return "; ".join(f"{name} {value}" for name, value in directives.items())


def _add(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    if HEADER not in response:
        response[HEADER] = policy(request)
    return response


@sync_and_async_middleware
def content_security_policy(get_response):
    if iscoroutinefunction(get_response):

        async def middleware(request):
            return _add(request, await get_response(request))

    else:

        def middleware(request):
            return _add(request, get_response(request))

    return middleware
