"""The profile page in a real browser: a member creates an API token, sees it once, uses
it against the API, and revokes it; the API docs page renders its operations (Swagger UI
from the panel's own static files)."""

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
