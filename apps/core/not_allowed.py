"""A page for a 405, where Django answers none.

`require_POST` (and `require_http_methods`) answer a method they refuse with an empty 405:
a blank page for someone who reloaded a form's answer or pressed Enter on a form's address
(issue 43). This middleware gives such an answer a body: the 405.html page, which says that
the address only takes a form and that nothing changed. The status and its `Allow` header
stay. A 405 that already has a body (the JSON API's) is left as it is.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


class MethodNotAllowedPage:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code != 405 or getattr(response, "streaming", False):
            return response
        if response.content:
            return response
        page = render(request, "405.html", {"allowed": response.get("Allow", "")}, status=405)
        if "Allow" in response:
            page["Allow"] = response["Allow"]
        return page
