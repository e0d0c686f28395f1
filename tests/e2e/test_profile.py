"""The profile page in a real browser: a member creates an API token, sees it once, uses
it against the API, and revokes it; the API docs page renders its operations (Swagger UI
from the panel's own static files)."""

import re

import httpx
import pytest

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e


def test_a_member_creates_uses_and_revokes_a_token_and_reads_the_api_docs(
    new_page, live_server_asgi
):
    page = new_page()
    login(page, "mia")
    page.get_by_role("link", name="mia").click()
    page.wait_for_url("**/accounts/profile/")
    page.get_by_label("Token name").fill("notebook")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_test_id("new-token").inner_text().strip()
    assert token.startswith("spk_")

    me = httpx.get(f"{live_server_asgi.url}/api/v1/me",
                   headers={"Authorization": f"Bearer {token}"}, timeout=10)  # fmt: skip
    assert me.status_code == 200 and me.json()["username"] == "mia"

    page.goto("/accounts/profile/")
    assert token not in page.content()  # shown once
    row = page.locator("tr", has_text="notebook")
    row.get_by_role("button", name="Revoke").click()
    page.wait_for_url("**/accounts/profile/")
    assert "revoked" in page.locator("tr", has_text="notebook").inner_text()
    again = httpx.get(f"{live_server_asgi.url}/api/v1/me",
                      headers={"Authorization": f"Bearer {token}"}, timeout=10)  # fmt: skip
    assert again.status_code == 401

    page.get_by_role("link", name="JSON API").click()
    page.wait_for_url("**/api/v1/docs")
    page.get_by_text("/api/v1/jobs/{job_id}/cancel").wait_for()
    assert page.locator(".opblock").count() >= 20


COUNT = (
    "from apps.gateway.models import GatewayKey; from apps.api.models import Webhook; "
    "print(GatewayKey.objects.filter(name='reload check').count(), "
    "Webhook.objects.filter(url='https://ci.example/reload-check').count())"
)


def test_a_reload_after_a_create_creates_nothing_and_shows_no_secret_again(
    new_page, live_server_asgi
):
    """Issue 43, item 5: creating a gateway key or a webhook ends on the profile page (a GET),
    so a reload neither creates a second one nor shows the secret again, and Enter on the
    form's own address gives a page that explains instead of an empty 405."""
    page = new_page()
    login(page, "mia")
    page.goto("/accounts/profile/")
    keys = page.locator("#gateway-keys")
    keys.get_by_label("Name").fill("reload check")
    keys.get_by_role("button", name="Create key").click()
    secret = page.get_by_test_id("new-key").inner_text().strip()
    assert secret.startswith("spg_")
    # the page, not the POST-only URL; the query names the shown entry, not the secret
    assert re.search(r"/accounts/profile/\?shown=[\w-]+#gateway-keys$", page.url)

    hooks = page.locator("#webhooks")
    hooks.get_by_label("URL").fill("https://ci.example/reload-check")
    hooks.get_by_role("button", name="Add webhook").click()
    hook_secret = page.get_by_test_id("new-webhook-secret").inner_text().strip()
    assert len(hook_secret) >= 40 and secret not in page.content()  # each shown once
    assert re.search(r"/accounts/profile/\?shown=[\w-]+#webhooks$", page.url)

    page.reload()
    page.locator("#webhook-list").wait_for()
    html = page.content()
    assert secret not in html and hook_secret not in html
    assert page.get_by_test_id("new-webhook-secret").count() == 0
    assert live_server_asgi.manage("shell", "-c", COUNT).split()[-2:] == ["1", "1"]

    for url in ("/accounts/profile/keys/", "/accounts/profile/webhooks/"):
        response = page.goto(url)  # Enter in the address bar
        assert response.status == 405
        assert "only takes a form" in page.locator("h1").inner_text()
        page.get_by_role("link", name="Back to the dashboard").wait_for()
    assert live_server_asgi.manage("shell", "-c", COUNT).split()[-2:] == ["1", "1"]
