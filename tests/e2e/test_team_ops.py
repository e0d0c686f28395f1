"""Everyday team operations in Chromium, as an admin, an operator and a member at once
(issue #16): a user changes their password and signs in with it; Stop asks first and names
the member who is chatting; a 5,000-character unbroken notice keeps every page's layout at
desktop width and at 390 px; a notice is deleted and leaves the member's open page."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.conftest import PASSWORD, wait_for
from tests.e2e.conftest import READY_RUN, STATE, login

pytestmark = pytest.mark.e2e

LONG_NOTICE = """
from django.contrib.auth import get_user_model
from apps.core.models import Notice
otto = get_user_model().objects.get(username="otto")
print(Notice.objects.create(author=otto, message="{text}").pk)
"""
# Scrolling sideways is what a too-wide page forces on everyone (2,853 px in #16).
NO_SIDEWAYS_SCROLL = "document.scrollingElement.scrollWidth <= window.innerWidth"


def test_a_user_changes_their_password_and_signs_in_with_it(new_page, live_server_asgi):
    name = f"pat-{uuid.uuid4().hex[:6]}"  # own account: the shared personas keep theirs
    live_server_asgi.manage("createuser", name, "--role", "member", "--password-stdin",
                            stdin=PASSWORD + "\n")  # fmt: skip
    here, elsewhere = new_page(), new_page()
    login(here, name)
    login(elsewhere, name)
    here.locator("a.user").click()
    here.get_by_role("link", name="Change your password").click()
    new = "a-fresh-passphrase-for-pat-93"
    here.get_by_label("Old password").fill(PASSWORD)
    here.get_by_label("New password", exact=True).fill(new)
    here.get_by_label("New password confirmation").fill(new)
    here.get_by_role("button", name="Change password").click()
    expect(here.get_by_text("Password changed.")).to_be_visible()
    # This browser stays signed in; the other session is signed out at its next request.
    elsewhere.reload()
    expect(elsewhere).to_have_url(re.compile(r"/accounts/login/"))
    here.get_by_role("button", name="Sign out").click()
    login(here, name, new)
    expect(here.get_by_role("heading", name="Dashboard")).to_be_visible()


def test_stop_asks_first_naming_the_member_who_chats(new_page, live_server_asgi, demo_worker):
    pk = live_server_asgi.manage("shell", "-c", READY_RUN).strip().splitlines()[-1]
    wait_for(lambda: live_server_asgi.manage("shell", "-c", STATE.format(pk=pk)).split()[-1]
             == "ready", 120, f"run {pk} ready")  # fmt: skip
    member, operator = new_page(), new_page()
    login(member, "mia")
    login(operator, "otto")
    member.get_by_role("link", name="Chat", exact=True).click()
    member.get_by_role("button", name="New chat").click()
    expect(member.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)
    member.get_by_label("Message").fill("/sparksim echo is anyone still using this model?")
    member.get_by_role("button", name="Send").click()
    expect(member.locator(".chat-assistant").last.locator("[data-stats]")).to_contain_text(
        "finish", timeout=30_000
    )

    operator.goto(f"/runs/{pk}/")
    operator.get_by_role("button", name="Stop").click()
    dialog = operator.get_by_role("alertdialog")
    expect(dialog.get_by_test_id("confirm-chatting")).to_contain_text("mia")
    expect(dialog).to_contain_text("15 minutes")
    # Going back changes nothing; confirming stops it.
    operator.get_by_role("link", name="Cancel").click()
    assert live_server_asgi.manage("shell", "-c", STATE.format(pk=pk)).split()[-1] == "ready"
    operator.get_by_role("button", name="Stop").click()
    operator.get_by_role("button", name=f"Yes, stop run {pk}").click()
    expect(operator.locator(".run-progress .state-badge")).to_have_text("Stopped", timeout=30_000)


def test_a_long_notice_keeps_the_layout_and_is_deleted_from_open_pages(new_page, live_server_asgi):
    text = "x" * 5000  # one unbroken word, written past the form's cap
    pk = live_server_asgi.manage("shell", "-c", LONG_NOTICE.format(text=text)).split()[-1]
    admin, member = new_page(), new_page()
    login(admin, "ada")
    login(member, "mia")
    pages = ["/", "/runs/", "/recipes/", "/hosts/", "/hosts/local-sim/", "/benchmarks/"]
    for width in (1280, 390):
        member.set_viewport_size({"width": width, "height": 844})
        for path in pages:
            member.goto(path)
            wide = member.evaluate("[document.scrollingElement.scrollWidth, window.innerWidth]")
            assert member.evaluate(NO_SIDEWAYS_SCROLL), f"{path} at {width} px: {wide}"
    member.goto("/")
    notice = member.locator(f"#notice-{pk}")
    expect(notice).to_be_visible()
    # Measured in the page once laid out (a live re-render may swap the strip in meanwhile).
    width = member.wait_for_function(
        f"() => {{ const el = document.getElementById('notice-{pk}');"
        " const w = el ? el.getBoundingClientRect().width : 0; return w > 0 && w; }"
    ).json_value()
    assert width <= 390, width
    expect(notice).to_be_visible()
    # A member may not delete an operator's notice; the admin may, and it leaves the
    # member's open page without a reload.
    expect(notice.get_by_role("button", name="Delete this notice")).to_have_count(0)
    admin.locator(f"#notice-{pk}").get_by_role("button", name="Delete this notice").click()
    expect(admin.locator(f"#notice-{pk}")).to_have_count(0)
    expect(member.locator(f"#notice-{pk}")).to_be_hidden()
    member.reload()
    expect(member.locator(f"#notice-{pk}")).to_have_count(0)
