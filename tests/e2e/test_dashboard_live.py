"""A member's dashboard in a real browser receives what an operator pushes, live."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e


def test_anonymous_visitor_lands_on_the_login_page(new_page):
    page = new_page()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()


def test_wrong_password_shows_a_clear_error_and_keeps_the_username(new_page):
    page = new_page()
    login_page = page
    login_page.goto("/accounts/login/")
    login_page.get_by_label("Username").fill("mia")
    login_page.get_by_label("Password").fill("not-the-password")
    login_page.get_by_role("button", name="Sign in").click()
    expect(login_page.get_by_role("alert")).to_contain_text("correct username and password")
    expect(login_page.get_by_label("Username")).to_have_value("mia")


def test_member_sees_the_dashboard_and_receives_a_pushed_notice(new_page):
    member = new_page()
    login(member, "mia")
    expect(member.get_by_role("heading", name="Dashboard")).to_be_visible()
    expect(member.locator(".role")).to_have_text("Member")
    # The socket is up: the badge says live (not a stale page pretending to be live).
    expect(member.locator("#live-status")).to_have_text("live")
    # Members have no notice form: posting is an operator action.
    expect(member.locator("#notice-form")).to_have_count(0)
    # The system card loaded over htmx.
    expect(member.locator("#system-status")).to_contain_text("Redis: reachable")

    operator = new_page()
    login(operator, "otto")
    text = "Swapping spark-1 to the 120B recipe at 14:00"
    operator.get_by_placeholder("e.g. Swapping").fill(text)
    operator.get_by_role("button", name="Post notice").click()
    # htmx swapped a fresh, empty form back in.
    expect(operator.get_by_placeholder("e.g. Swapping")).to_have_value("")

    # The member's page, never reloaded, shows the notice pushed over /ws/events/.
    notice = member.locator("#notices li.notice").first
    expect(notice).to_contain_text(text)
    expect(notice).to_contain_text("otto")
    expect(member.locator("#notices li.empty")).to_be_hidden()


def test_operator_sees_why_an_empty_notice_is_refused(new_page):
    operator = new_page()
    login(operator, "otto")
    field = operator.get_by_placeholder("e.g. Swapping")
    field.fill("   ")
    operator.get_by_role("button", name="Post notice").click()
    expect(operator.locator("#notice-form [role=alert]")).to_contain_text("Write a message")
