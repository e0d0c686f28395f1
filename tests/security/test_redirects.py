"""A `next=` redirect stays on the panel, for every view that takes one: sign-in (GET and
POST), the Django admin's sign-in, sign-out, a benchmark job's cancel and a refused run
start. Off-panel targets (another site, a scheme trick, the same host on another port)
fall back to the view's own page; an on-panel path is honoured.

The client talks to the panel as `127.0.0.1:8000`, so `http://127.0.0.1:9999/` is the
panel's host on a foreign port (a notebook on a Spark, say).
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from apps.benchmarks.models import Job
from apps.core.redirects import is_panel_url
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

HOST = "127.0.0.1:8000"
OFF_PANEL = [
    "//evil.example",
    "//evil.example/accounts/login/",
    "https://evil.example",
    "http://evil.example/",
    "/\\evil.example",
    "\\\\evil.example",
    "/\\/evil.example",
    "javascript:alert(document.cookie)",
    "JavaScript:alert(1)",
    "http:evil.example",
    "https:/evil.example",
    "http://127.0.0.1:9999/",
    "http://127.0.0.1:9999/runs/",
    "///evil.example",
    " //evil.example",
    "http://127.0.0.1:8000@evil.example/",
]
# Bare words: Django's sign-in takes them as relative URLs (harmless), but `redirect()` in
# the panel's own views would look them up as URL names (a 500 once): refused by the check.
BARE_WORDS = ["-3462646", "dashboard"]
ON_PANEL = "/runs/?state=ready"


def _client(user=None) -> Client:
    client = Client(HTTP_HOST=HOST)
    if user is not None:
        client.force_login(user)
    return client


def _location(response) -> str:
    assert response.status_code == 302, (response.status_code, response.content[:300])
    return response["Location"]


def _assert_stays(location: str, expected: str, target: str) -> None:
    assert location == expected, f"next={target!r} sent the browser to {location!r}"


def test_the_check_refuses_every_off_panel_target_and_accepts_panel_urls(rf):
    request = rf.get("/", HTTP_HOST=HOST)
    for target in [*OFF_PANEL, *BARE_WORDS]:
        assert not is_panel_url(request, target), target
    for target in (ON_PANEL, "/", f"http://{HOST}/runs/", "runs/"):
        assert is_panel_url(request, target), target
    secure = rf.get("/", HTTP_HOST=HOST, secure=True)
    assert not is_panel_url(secure, f"http://{HOST}/runs/")  # HTTPS stays HTTPS
    assert is_panel_url(secure, f"https://{HOST}/runs/")


def test_sign_in_sends_off_panel_next_to_the_dashboard(operator):
    login = reverse("login")
    for target in [*OFF_PANEL, ON_PANEL]:
        client = _client()
        form = client.get(login, {"next": target})
        assert form.status_code == 200
        response = client.post(
            login, {"username": operator.username, "password": PASSWORD, "next": target}
        )
        expected = ON_PANEL if target == ON_PANEL else reverse("dashboard")
        _assert_stays(_location(response), expected, target)
        # Already signed in: the login page forwards at once, through the same check.
        _assert_stays(_location(client.get(login, {"next": target})), expected, target)


def test_the_admin_sign_in_keeps_next_on_the_panel(admin_user):
    login = reverse("admin:login")
    for target in OFF_PANEL:
        client = _client()
        response = client.post(
            login, {"username": admin_user.username, "password": PASSWORD, "next": target}
        )
        location = _location(response)
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location
        assert "evil" not in location and "9999" not in location, location


def test_sign_out_sends_off_panel_next_to_the_login_page(operator):
    for target in [*OFF_PANEL, ON_PANEL]:
        client = _client(operator)
        response = client.post(reverse("logout"), {"next": target})
        expected = ON_PANEL if target == ON_PANEL else reverse("login")
        _assert_stays(_location(response), expected, target)


def test_a_job_cancel_sends_off_panel_next_to_the_job(world, operator):
    suite, recipe, host = world["suite"], world["recipe"], world["host"]
    for target in [*OFF_PANEL, *BARE_WORDS, ON_PANEL]:
        job = Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=operator,
                                 plan=world["job"].plan)  # fmt: skip
        response = _client(operator).post(
            reverse("benchmark-cancel", args=[job.pk]), {"next": target}
        )
        expected = ON_PANEL if target == ON_PANEL else job.get_absolute_url()
        _assert_stays(_location(response), expected, target)
        job.refresh_from_db()
        assert job.state in ("cancelled", "cancelling"), job.state


def test_a_refused_run_start_sends_off_panel_next_to_the_runs_page(world, operator):
    # The host already serves a ready run: the start is refused and the view redirects.
    data = {"recipe": world["recipe"].pk, "host": world["host"].pk}
    for target in [*OFF_PANEL, *BARE_WORDS, ON_PANEL]:
        response = _client(operator).post(reverse("run-start"), {**data, "next": target})
        expected = ON_PANEL if target == ON_PANEL else reverse("runs")
        _assert_stays(_location(response), expected, target)
