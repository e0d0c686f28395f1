"""/api/v1/… — the API checks its own credentials (token or session) and answers in JSON,
so the site-wide login redirect does not apply to it."""

from django.contrib.auth.decorators import login_not_required
from django.shortcuts import redirect
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt

from apps.api.api import api
from apps.api.errors import json_error


def _docs(request, **kwargs):
    return redirect("api-v1:openapi-view")


def _open(patterns):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            _open(entry.url_patterns)
        elif isinstance(entry, URLPattern):
            if entry.name == "api-root":  # ninja's root only raises 404: send people to the docs
                entry.callback = _docs
            entry.callback.login_required = False
    return patterns


@csrf_exempt  # nothing to protect: it only ever answers 404
@login_not_required
def not_found(request, rest=""):
    return json_error(404, "not_found", f"No API endpoint /api/{rest}.")


_patterns, _app, _namespace = api.urls
urlpatterns = [
    path("v1/", (_open(_patterns), _app, _namespace)),
    re_path(r"^(?P<rest>.*)$", not_found),
]
