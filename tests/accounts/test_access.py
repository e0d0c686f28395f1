"""Login everywhere, roles enforced on the server, rate-limited login, CSRF on posts."""

import json
import logging

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from apps.core.models import Notice
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

# Views that are deliberately reachable without a login. `panel-metrics` is for
# Prometheus: a token or an allowed network instead (tests/telemetry/test_panel_metrics.py).
PUBLIC = {"login", "healthz", "panel-metrics"}


def _concrete_paths():
    """Every named, argument-free URL of the panel (admin excluded: it has its own login)."""

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.namespace == "admin":
                    continue
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and p.name and not p.pattern.converters:
                yield p.name, "/" + prefix + str(p.pattern)

    return sorted(set(walk(get_resolver().url_patterns)))


def test_the_url_walk_finds_the_pages():
    names = {name for name, _ in _concrete_paths()}
    assert {"dashboard", "notice-create", "status", "recipes", "logout"} <= names


@pytest.mark.parametrize("name,path", _concrete_paths())
def test_anonymous_is_sent_to_login_everywhere_but_public_views(client, name, path):
    for method in (client.get, client.post):
        response = method(path)
        if name in PUBLIC:
            assert response.status_code in (200, 405, 503, 403), (name, response.status_code)
            continue
        if path.startswith("/api/"):
            # The JSON API answers scripts with 401 (tests/api); its docs page and root
            # send a browser to the login page (the root via the docs page).
            assert response.status_code in (401, 302, 405), (name, response.status_code)
            if response.status_code == 302:
                assert response["Location"].startswith((reverse("login"), "/api/v1/docs"))
            continue
        assert response.status_code == 302, (name, method.__name__, response.status_code)
        assert response["Location"].startswith(reverse("login")), name


def test_account_without_a_role_sees_an_explanation_not_the_panel(client_as, outsider):
    response = client_as(outsider).get(reverse("dashboard"))
    assert response.status_code == 403
    assert b"no role yet" in response.content
    # ...but may still sign out.
    assert client_as(outsider).post(reverse("logout")).status_code == 302


def test_member_gets_403_posting_a_notice_which_is_an_operator_action(client_as, member):
    response = client_as(member).post(reverse("notice-create"), {"message": "hi", "level": "info"})
    assert response.status_code == 403
    assert b"does not allow this action" in response.content
    assert not Notice.objects.exists()


def test_a_members_403_is_one_log_line_without_a_traceback(client_as, member, caplog):
    """Django logs a PermissionDenied with the exception attached: 35 lines of traceback for
    every refused member request (issue 38). One line, its path, no traceback."""
    caplog.set_level(logging.INFO)
    client = client_as(member)
    for path in (reverse("notice-create"), reverse("recipe-import")):
        caplog.clear()
        response = client.post(path, {"message": "hi", "level": "info"})
        assert response.status_code == 403, path
        [line] = [r for r in caplog.records if r.name == "django.request"]
        assert line.levelname == "WARNING"
        assert line.getMessage() == f"Forbidden (Permission denied): {path}"
        assert line.exc_info is None and not line.exc_text, path
        assert "Traceback" not in caplog.text, caplog.text


def test_member_does_not_see_the_notice_form(client_as, member):
    assert b'id="notice-form"' not in client_as(member).get(reverse("dashboard")).content


def test_operator_posts_a_notice(client_as, operator):
    response = client_as(operator).post(
        reverse("notice-create"), {"message": "  Swapping spark-1 at 14:00 ", "level": "warning"}
    )
    assert response.status_code == 302
    notice = Notice.objects.get()
    assert notice.message == "Swapping spark-1 at 14:00"
    assert notice.author == operator


def test_htmx_post_returns_the_form_partial_and_a_client_event(client_as, operator):
    response = client_as(operator).post(
        reverse("notice-create"), {"message": "hello", "level": "info"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert "notice-posted" in json.loads(response["HX-Trigger"])
    assert b'id="notice-form"' in response.content
    assert b"<html" not in response.content


def test_rejected_notice_keeps_what_the_user_typed_and_says_why(client_as, operator):
    typed = "x" * 300
    response = client_as(operator).post(
        reverse("notice-create"), {"message": typed, "level": "info"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert typed.encode() in response.content
    assert b"at most 280 characters" in response.content
    assert not Notice.objects.exists()


def test_csrf_is_enforced_on_posts_and_the_htmx_header_satisfies_it(operator):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    url = reverse("notice-create")
    assert client.post(url, {"message": "no token", "level": "info"}).status_code == 403
    assert not Notice.objects.exists()

    # What the browser does: the page's <body hx-headers> carries the token.
    page = client.get(reverse("dashboard"))
    token = page.content.split(b'"X-CSRFToken": "')[1].split(b'"')[0].decode()
    response = client.post(
        url,
        {"message": "with token", "level": "info"},
        HTTP_X_CSRFTOKEN=token,
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert Notice.objects.get().message == "with token"


def test_login_works_and_is_rate_limited_after_repeated_failures(member):
    client = Client()
    url = reverse("login")
    ok = client.post(url, {"username": member.username, "password": PASSWORD})
    assert ok.status_code == 302 and ok["Location"] == reverse("dashboard")

    attacker = Client()
    for _ in range(4):
        bad = attacker.post(url, {"username": member.username, "password": "wrong"})
        assert bad.status_code == 200
        assert b"Please enter a correct username and password" in bad.content
    # The fifth failure locks the username from this address; then even the right
    # password is refused until the cool-off ends.
    fifth = attacker.post(url, {"username": member.username, "password": "wrong"})
    assert fifth.status_code == 429
    locked = attacker.post(url, {"username": member.username, "password": PASSWORD})
    assert locked.status_code == 429
    assert b"Too many failed sign-ins" in locked.content


def test_healthz_is_public_and_reports_services(client, redis_url):
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": True, "redis": True}
