"""The Users page in Chromium (issue 43): an admin invites someone with a set-password link
shown once, the invitee sets a password through it and signs in, the admin makes them an
operator, then deactivates them — their open session is signed out at its next request."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

CHOSEN = "an-invitee-chose-this-passphrase-52"


def test_an_admin_invites_promotes_and_deactivates_a_user(new_page, live_server_asgi):
    name = f"ivy-{uuid.uuid4().hex[:6]}"
    admin, invitee = new_page(), new_page()
    login(admin, "ada")
    admin.get_by_role("link", name="Users", exact=True).click()
    expect(admin.get_by_role("heading", name="Users", exact=True)).to_be_visible()
    admin.get_by_label("Username").fill(name)
    admin.get_by_label("Role", exact=True).select_option("member")
    admin.get_by_label("a set-password link (they choose it)").check()
    admin.get_by_role("button", name="Add user").click()
    expect(admin.get_by_role("heading", name=f"Created {name}")).to_be_visible()
    link = admin.locator("[data-secret]").inner_text()
    assert "/accounts/set-password/" in link
    admin.reload()  # shown once; the reload repeats a GET and creates nothing
    expect(admin.locator("[data-shown-once]")).to_have_count(0)
    expect(admin.locator(f'tr[data-user="{name}"]')).to_have_count(1)
    expect(admin.locator(f'tr[data-user="{name}"] [data-status]')).to_contain_text(
        "no password yet"
    )

    invitee.goto(link)
    invitee.get_by_label("New password", exact=True).fill(CHOSEN)
    invitee.get_by_label("New password confirmation").fill(CHOSEN)
    invitee.get_by_role("button", name="Set password").click()
    expect(invitee.get_by_text("Your password is set")).to_be_visible()
    login(invitee, name, CHOSEN)
    expect(invitee.get_by_role("heading", name="Dashboard")).to_be_visible()

    row = admin.locator(f'tr[data-user="{name}"]')
    admin.reload()
    row.get_by_label(f"Role of {name}").select_option("operator")
    row.get_by_role("button", name="Set role").click()
    expect(admin.get_by_text(f"{name} is now Operator.")).to_be_visible()
    invitee.reload()
    expect(invitee.locator(".role")).to_have_text("Operator")

    row.get_by_role("button", name="Deactivate").click()
    expect(admin.get_by_text(f"{name} is deactivated")).to_be_visible()
    expect(row.locator("[data-status]")).to_contain_text("deactivated")
    invitee.reload()
    expect(invitee).to_have_url(re.compile(r"/accounts/login/"))
