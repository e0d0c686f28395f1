"""Changing your own password: the page, the session kept, the other sessions signed out."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

NEW = "a-brand-new-passphrase-77"


def sign_in(user, password=PASSWORD) -> Client | None:
    """Through the real login form (the login rate limiter needs the request)."""
    client = Client()
    response = client.post(
        "/accounts/login/", {"username": user.get_username(), "password": password}
    )
    return client if response.status_code == 302 else None


def signed_in(user, password=PASSWORD) -> Client:
    client = sign_in(user, password)
    assert client is not None
    return client


def test_the_profile_links_to_the_password_page_which_signs_out_only_the_other_sessions(member):
    here, elsewhere = signed_in(member), signed_in(member)
    assert "/accounts/password/" in here.get("/accounts/profile/").content.decode()
    page = here.get("/accounts/password/")
    assert page.status_code == 200 and "Change your password" in page.content.decode()

    response = here.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == "/accounts/profile/"
    assert "Password changed" in response.content.decode()
    member.refresh_from_db()
    assert member.check_password(NEW)
    # This browser is still signed in; the other session is sent to the login page.
    assert here.get("/").status_code == 200
    other = elsewhere.get("/")
    assert other.status_code == 302 and other["Location"].startswith("/accounts/login/")
    # The new password signs in, the old one no longer does.
    assert sign_in(member, NEW) is not None
    assert sign_in(member, PASSWORD) is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"old_password": "wrong", "new_password1": NEW, "new_password2": NEW}, "old password"),
        ({"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW + "x"}, "didn"),
        ({"old_password": PASSWORD, "new_password1": "1234", "new_password2": "1234"}, "too short"),
    ],
)
def test_a_wrong_old_password_or_a_weak_new_one_is_refused_in_words(member, data, says):
    client = signed_in(member)
    response = client.post("/accounts/password/", data)
    assert response.status_code == 200
    assert says in response.content.decode()
    member.refresh_from_db()
    assert member.check_password(PASSWORD)


def test_anonymous_visitors_are_sent_to_sign_in():
    response = Client().get("/accounts/password/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
