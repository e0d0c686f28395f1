"""A key's own limits in Chromium (issue 43): a member creates a key on the profile page, an
admin gives it a daily token budget on the Limits page, and after a request through the
key (the real /v1 against the demo model) its owner sees the key's limit and what is left
of it today on the profile page."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login
from tests.gateway.fixtures import flush_gateway_keys

pytestmark = pytest.mark.e2e


def test_an_admin_limits_a_key_and_its_owner_sees_what_is_left(new_page, live_server_asgi,
                                                                ready_run, redis_url):  # fmt: skip
    # The key's counters are keyed by its id, which this session's fresh database may have
    # given a key of an earlier session too: none of their counts are left in Redis.
    flush_gateway_keys(redis_url)
    member, admin = new_page(), new_page()
    login(member, "mia")
    member.goto("/accounts/profile/")
    card = member.locator("#gateway-keys")
    card.get_by_label("Name").fill("capped script")
    card.get_by_role("button", name="Create key").click()
    clear = member.get_by_test_id("new-key").inner_text().strip()
    row = member.locator("tr", has_text="capped script")
    expect(row.get_by_test_id("key-limits")).to_have_text("only your account's")

    login(admin, "ada")
    admin.get_by_role("link", name="Limits", exact=True).click()
    expect(admin.get_by_role("heading", name="Limits", exact=True)).to_be_visible()
    key_row = admin.locator(f'tr[data-key="{clear[:12]}"]')
    expect(key_row).to_contain_text("mia")
    key_row.get_by_label("Tokens per day").fill("-3")
    key_row.get_by_role("button", name="Save").click()
    expect(admin.locator(f'tr[data-key="{clear[:12]}"] .error')).to_have_text(
        "A limit is 0 or more (blank: no limit of tokens per UTC day)."
    )
    key_row.get_by_label("Tokens per day").fill("50000")
    key_row.get_by_role("button", name="Save").click()
    expect(admin.get_by_text("Limits of the key “capped script” (mia) saved")).to_be_visible()
    expect(key_row.get_by_label("Tokens per day")).to_have_value("50000")

    v1, auth = live_server_asgi.url + "/v1", {"Authorization": f"Bearer {clear}"}
    model = httpx.get(v1 + "/models", headers=auth, timeout=10).json()["data"][0]["id"]
    answer = httpx.post(v1 + "/chat/completions", headers=auth, timeout=60, json={
        "model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}],
    })  # fmt: skip
    assert answer.status_code == 200, answer.text
    used = answer.json()["usage"]["total_tokens"]

    member.goto("/accounts/profile/")
    expect(row.get_by_test_id("key-limits")).to_have_text(
        f"Tokens today: {used} of 50,000 · {50000 - used:,} left"
    )
