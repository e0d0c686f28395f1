"""Changing your own password: the page, the session kept, the other sessions signed out;
wrong current passwords limited like sign-in; API tokens and gateway keys revoked with it
unless the user unticks the box (issue 38)."""

from __future__ import annotations

import time
from datetime import timedelta
from html.parser import HTMLParser

import httpx
import openai
import pytest
from django.test import Client

from apps.api.tokens import token_create
from apps.audit.models import AuditEntry
from apps.core.redisconn import shared_client
from apps.gateway import keys, store
from apps.gateway.keys import key_create
from tests.conftest import PASSWORD, free_port

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


# --- wrong current passwords (issue 38, finding 7) ------------------------------------------


def change(client: Client, old: str, new: str = NEW, **extra):
    return client.post(
        "/accounts/password/",
        {"old_password": old, "new_password1": new, "new_password2": new, **extra},
    )


def test_wrong_current_passwords_lock_the_page_for_the_account_like_sign_in(
    member, operator, settings
):
    """A stolen session must not guess its way to the password: after LOGIN_FAILURE_LIMIT
    wrong current passwords no password is checked, the right one neither, in any session
    of the account, until the cool-off passes; the lock is audited."""
    settings.AXES_COOLOFF_TIME = timedelta(seconds=3)
    limit = settings.AXES_FAILURE_LIMIT
    assert limit == 5
    thief, owner = signed_in(member), signed_in(member)
    for n in range(limit - 1):
        answer = change(thief, f"guess-{n}")
        assert answer.status_code == 200 and "old password" in answer.content.decode(), n
    locked = change(thief, "guess-last")
    assert locked.status_code == 429
    assert "Too many wrong current passwords" in locked.content.decode()
    # The right password is not checked now, from this session or the owner's other one.
    for client in (thief, owner):
        refused = change(client, PASSWORD)
        assert refused.status_code == 429
        assert "Too many wrong current passwords" in refused.content.decode()
        assert "old password was entered incorrectly" not in refused.content.decode()
    member.refresh_from_db()
    assert member.check_password(PASSWORD)
    [row] = AuditEntry.objects.filter(action="password.lock")
    assert (row.actor, row.address, row.target_id) == (member, "127.0.0.1", str(member.pk))
    assert f"{limit} wrong current passwords" in row.message
    # Another account is not locked.
    assert change(signed_in(operator), PASSWORD).status_code == 302
    # The cool-off over, the right password changes it.
    time.sleep(3.2)
    assert change(owner, PASSWORD).status_code == 302
    member.refresh_from_db()
    assert member.check_password(NEW)


def test_with_redis_unreachable_no_password_is_checked(member, settings):
    """A limit that cannot count must not let guesses through: the page says so (503)."""
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    settings.CACHES = {**settings.CACHES,
                       "shared": {**settings.CACHES["shared"], "LOCATION": nobody}}  # fmt: skip
    answer = change(signed_in(member), PASSWORD)
    assert answer.status_code == 503
    assert "cannot count wrong passwords right now" in answer.content.decode()
    member.refresh_from_db()
    assert member.check_password(PASSWORD)


# --- API tokens and gateway keys (issue 38, finding 8) --------------------------------------


class _Form(HTMLParser):
    """The password form's inputs as a browser would send them (checked boxes only)."""

    def __init__(self):
        super().__init__()
        self.fields: dict[str, str] = {}
        self.boxes: dict[str, bool] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag != "input" or "name" not in a:
            return
        if a.get("type") == "checkbox":
            self.boxes[a["name"]] = "checked" in a
            if "checked" in a:
                self.fields[a["name"]] = a.get("value", "on")
        elif a.get("type") != "submit":
            self.fields[a["name"]] = a.get("value", "")


def _as_a_browser(client: Client, untick: bool = False):
    page = client.get("/accounts/password/")
    form = _Form()
    form.feed(page.content.decode())
    assert form.boxes == {"revoke_credentials": True}, form.boxes  # ticked by default
    assert "Also revoke my API tokens and gateway keys" in page.content.decode()
    assert "keep working" in page.content.decode()  # the help text says what unticking does
    data = {**form.fields, "old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}
    if untick:
        data.pop("revoke_credentials")
    return client.post("/accounts/password/", data, follow=True)


def _token_works(panel, clear: str) -> bool:
    answer = httpx.get(panel.url + "/api/v1/gateway/keys",
                       headers={"Authorization": f"Bearer {clear}"}, timeout=30)  # fmt: skip
    assert answer.status_code in (200, 401), answer.text[:300]
    return answer.status_code == 200


def _key_works(panel, clear: str) -> bool:
    try:
        openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0, timeout=30).models.list()
    except openai.AuthenticationError:
        return False
    return True


@pytest.mark.django_db(transaction=True)
def test_a_password_change_revokes_the_users_tokens_and_keys_by_default(
    panel, member, operator, redis_url
):
    tokens = [token_create(user=member, name=f"ci {n}")[1] for n in range(2)]
    key = key_create(user=member, name="Open WebUI")[1]
    theirs = token_create(user=operator, name="operator ci")[1]
    their_key = key_create(user=operator, name="operator's")[1]
    # Each works now; the key's record is in Redis, as every gateway process holds it.
    assert all(_token_works(panel, t) for t in tokens) and _key_works(panel, key)

    done = _as_a_browser(signed_in(member))
    assert done.redirect_chain[-1][0] == "/accounts/profile/"
    page = done.content.decode()
    assert "API tokens and gateway keys revoked: 2 API tokens, 1 gateway key" in page

    # Revoked at once: tombstoned in Redis before any gateway looks again (key_revoke's
    # mark, which no re-read of a stale record can overwrite), so the key fails at its very
    # next /v1 request in every process.
    redis = shared_client(redis_url, timeout=2.0)
    assert redis.get(store.key_name(keys.digest(key))) == store.REVOKED
    assert not any(_token_works(panel, t) for t in tokens)
    assert not _key_works(panel, key)
    assert _token_works(panel, theirs) and _key_works(panel, their_key)  # not someone else's
    actions = list(AuditEntry.objects.filter(actor=member).values_list("action", flat=True))
    assert sorted(a for a in actions if a.endswith("revoke")) == [
        "key.revoke", "token.revoke", "token.revoke"]  # fmt: skip
    change_row = AuditEntry.objects.get(action="password.change")
    assert change_row.message == "API tokens and gateway keys revoked: 2 API tokens, 1 gateway key"


@pytest.mark.django_db(transaction=True)
def test_unticked_the_tokens_and_keys_keep_working(panel, member):
    token = token_create(user=member, name="ci")[1]
    key = key_create(user=member, name="Open WebUI")[1]
    assert _token_works(panel, token) and _key_works(panel, key)

    done = _as_a_browser(signed_in(member), untick=True)
    assert done.redirect_chain[-1][0] == "/accounts/profile/"
    assert "Your API tokens and gateway keys keep working" in done.content.decode()
    member.refresh_from_db()
    assert member.check_password(NEW)
    assert _token_works(panel, token) and _key_works(panel, key)
    assert not AuditEntry.objects.filter(action__in=["token.revoke", "key.revoke"]).exists()
    assert AuditEntry.objects.get(action="password.change").message == (
        "API tokens and gateway keys kept"
    )
