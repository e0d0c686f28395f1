"""The Content-Security-Policy: on every response of the URL walk (pages, partials, the API,
its docs page, error pages, the anonymous login page), and the templates give it nothing to
refuse: no inline script, no inline event handler, no `javascript:` URL, no style attribute
or <style> block, no htmx eval feature.

tests/e2e/test_csp_browser.py shows in Chromium that the pages keep working under it with
no violation.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from apps.core.csp import HEADER
from tests.security.urlwalk import concrete_path, routes

ROOT = Path(settings.BASE_DIR)
# Project templates; apps' own templates too, if any app grows a templates/ folder.
TEMPLATE_DIRS = [ROOT / "templates", *sorted(ROOT.glob("apps/*/templates"))]
STATIC_JS = ROOT / "static" / "js"

# Each directive the policy must have, and what must not appear anywhere in it.
REQUIRED = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "object-src": "'none'",
    "frame-ancestors": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
}
FORBIDDEN_SOURCES = ("'unsafe-inline'", "'unsafe-eval'", "'unsafe-hashes'", "*", "http:", "https:")


def _directives(header: str) -> dict[str, list[str]]:
    parsed = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            parsed[words[0]] = words[1:]
    return parsed


def _problem(where: str, response) -> str | None:
    header = response.get(HEADER)
    if not header:
        return f"{where}: no {HEADER} header"
    directives = _directives(header)
    for name, value in REQUIRED.items():
        if directives.get(name) != [value]:
            return f"{where}: {name} is {directives.get(name)}, not {value}"
    loose = [s for sources in directives.values() for s in sources if s in FORBIDDEN_SOURCES]
    if loose:
        return f"{where}: the policy allows {loose}"
    return None


@pytest.mark.django_db
def test_every_response_of_the_walk_has_the_policy(world, admin_user, member, client_as):
    problems, walked = [], 0
    anonymous = Client()
    for route in routes():
        path = concrete_path(route, world)
        for who, client in (("admin", client_as(admin_user)), ("member", client_as(member))):
            response = client.get(path)
            walked += 1
            problem = _problem(f"GET {path} as {who} → {response.status_code}", response)
            if problem:
                problems.append(problem)
        response = anonymous.get(path)
        problem = _problem(f"GET {path} anonymous → {response.status_code}", response)
        if problem:
            problems.append(problem)
    assert walked >= 120, walked
    # A POST that fails, the 404 page, the admin, a static file.
    admin = client_as(admin_user)
    for where, response in (
        ("POST /accounts/login/ (wrong password)",
         anonymous.post(reverse("login"), {"username": "x", "password": "y"})),
        ("GET /no-such-page/", admin.get("/no-such-page/")),
        ("GET /admin/", admin.get("/admin/")),
        ("GET /static/js/events.js", admin.get("/static/js/events.js")),
    ):  # fmt: skip
        problem = _problem(where, response)
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
def test_the_socket_origin_is_the_requests_own_and_a_foreign_host_is_no_500(client_as, member):
    client = client_as(member, HTTP_HOST="127.0.0.1:8000")
    header = client.get("/")[HEADER]
    assert _directives(header)["connect-src"] == ["'self'", "ws://127.0.0.1:8000"]
    secure = client_as(member, HTTP_HOST="127.0.0.1:8000").get("/", secure=True)
    assert _directives(secure[HEADER])["connect-src"] == ["'self'", "wss://127.0.0.1:8000"]
    # Not one of ALLOWED_HOSTS: Django's 400, with the policy (and no socket origin).
    refused = Client(HTTP_HOST="evil.example").get("/accounts/login/")
    assert refused.status_code == 400
    assert _directives(refused[HEADER])["connect-src"] == ["'self'"]


def test_the_500_page_has_the_policy(client_as, admin_user, settings):
    from django.test import override_settings
    from django.urls import path

    def boom(request):
        raise RuntimeError("boom")

    class Urls:
        urlpatterns = [path("boom/", boom)]

    with override_settings(ROOT_URLCONF=Urls, DEBUG=False):
        response = Client(raise_request_exception=False).get("/boom/")
    assert response.status_code == 500
    assert _problem("GET /boom/ → 500", response) is None


# --- the templates: nothing inline -------------------------------------------------------

TAG = re.compile(r"<(?P<name>[a-zA-Z][\w-]*)(?P<attrs>(?:[^>\"']|\"[^\"]*\"|'[^']*')*)>", re.S)
ATTR = re.compile(r"""(?P<name>[^\s=/"'>]+)\s*(?:=\s*(?P<value>"[^"]*"|'[^']*'|[^\s>]+))?""")
# htmx attributes that evaluate JavaScript (blocked by the policy and switched off).
HTMX_EVAL = re.compile(r"^(?:data-)?hx-(?:on\b.*|vars)$")


def _template_files() -> list[Path]:
    files = [p for d in TEMPLATE_DIRS for p in sorted(d.rglob("*.html"))]
    assert len(files) >= 40, f"found only {len(files)} templates"
    return files


def _strip_django(text: str) -> str:
    """Template comments out; tags and variables kept (an attribute made of a variable is
    still an attribute)."""
    text = re.sub(r"{#.*?#}", "", text, flags=re.S)
    return re.sub(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}", "", text, flags=re.S)


def inline_problems(text: str, where: str) -> list[str]:
    problems = []
    text = _strip_django(text)
    for tag in TAG.finditer(text):
        name, attrs = tag["name"].lower(), tag["attrs"]
        found = {m["name"].lower(): (m["value"] or "").strip("\"'") for m in ATTR.finditer(attrs)}
        line = text.count("\n", 0, tag.start()) + 1
        if name == "script":
            kind = found.get("type", "").lower()
            if "src" not in found and kind not in ("application/json", "application/ld+json"):
                problems.append(f"{where}:{line}: an inline <script>")
        if name == "style":
            problems.append(f"{where}:{line}: a <style> block")
        for attr, value in found.items():
            if attr.startswith("on"):
                problems.append(f"{where}:{line}: an inline event handler {attr}=")
            elif attr == "style":
                problems.append(f"{where}:{line}: a style attribute")
            elif HTMX_EVAL.match(attr):
                problems.append(f"{where}:{line}: {attr} (htmx evaluates it)")
            elif value.lower().lstrip().startswith(("javascript:", "js:")):
                problems.append(f"{where}:{line}: a javascript: URL in {attr}=")
    return problems


def test_the_check_finds_each_kind_of_inline_code():
    hostile = """<script>alert(1)</script><script src="/x.js"></script>
<form onsubmit="return confirm('x')"><a href="javascript:void(0)">x</a>
<div style="width: 5%"></div><style>p{}</style><button hx-on:click="x()">
<div hx-vals='js:{a: 1}'></div><IMG SRC=x ONERROR=alert(1)>
<script type="application/json" id="s">{}</script>{# <script>commented</script> #}"""
    found = inline_problems(hostile, "t")
    kinds = ["inline <script>", "onsubmit", "javascript: URL in href", "style attribute",
             "<style> block", "hx-on:click", "javascript: URL in hx-vals", "onerror"]  # fmt: skip
    for kind in kinds:
        assert any(kind in p for p in found), (kind, found)
    assert len(found) == len(kinds), found


def test_no_template_has_inline_script_handlers_or_styles():
    problems = []
    for path in _template_files():
        problems += inline_problems(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_scripts_write_no_inline_handlers_or_styles():
    """static/js builds DOM from data: no handler attributes, style attributes or eval."""
    bad = re.compile(
        r"""setAttribute\(\s*["'](?:on\w+|style)["']|\beval\(|new Function\(|"""
        r"""\.innerHTML\s*=\s*[^;]*(?:\son\w+=|style=)|document\.write\("""
    )
    problems = []
    for path in sorted(STATIC_JS.glob("*.js")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if bad.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not problems, "\n".join(problems)
