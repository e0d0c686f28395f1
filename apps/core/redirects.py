"""Where a form may send the browser next: only somewhere on this panel.

Every view that honours a `next` parameter goes through `safe_next` (Django's own
LoginView and LogoutView do the same check). A URL counts as the panel's when Django's
`url_has_allowed_host_and_scheme` accepts it for exactly the host (and port) the request
came to, with HTTPS required when the request itself was HTTPS; so `//evil.example`,
`https://evil.example`, `/\\evil.example`, `javascript:…`, `http:evil.example` and the same
host on another port (`http://127.0.0.1:9999/`) all fall back to the view's own page.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme

PARAM = "next"


def is_panel_url(request: HttpRequest, url: str | None) -> bool:
    # A URL, never a bare word: `redirect()` would look "-3462646" up as a URL name and
    # fail with NoReverseMatch (a 500); with a "/" or "." it is taken as a URL.
    return (
        bool(url)
        and ("/" in url or "." in url)
        and url_has_allowed_host_and_scheme(
            url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    )


def safe_next(request: HttpRequest, fallback, param: str = PARAM) -> str:
    """The request's `next` (POST, else GET) when it stays on the panel, else `fallback` (a
    URL, a URL name or a model, as `redirect()` takes)."""
    url = request.POST.get(param) or request.GET.get(param)
    if is_panel_url(request, url):
        return url
    return resolve_url(fallback)
