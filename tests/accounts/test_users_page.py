"""The Users page: an admin runs the team's accounts in the panel (issue 43) — create with a
set-password link or a password shown once, role changes, password resets, deactivation
that signs out and revokes tokens and keys — each change audited with the acting admin;
the command line's own rows name the machine's user."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from apps.accounts.roles import Role
from apps.accounts.services import user_role
from apps.api.models import ApiToken
from apps.api.tokens import token_create
from apps.audit.models import AuditEntry
from apps.gateway.keys import key_create
from apps.gateway.models import GatewayKey
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

USERS = "/accounts/users/"
NEW_PASSWORD = "a-long-chosen-passphrase-81"


def _shown(html: str) -> str | None:
    """The secret the page shows once (a link or a password), or None."""
    found = re.search(r"data-secret>([^<]+)<", html)
    return found.group(1) if found else None


def _sign_in(username: str, password: str) -> Client | None:
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    return client if response.status_code == 302 else None


def test_only_admins_see_or_change_users(client_as, admin_user, operator, member):
    for who in (operator, member):
        client = client_as(who)
        assert client.get(USERS).status_code == 403
        assert (
            client.post(USERS, {"username": "x", "role": "admin", "how": "link"}).status_code == 403
        )
        assert client.post(f"/accounts/users/{who.pk}/role/", {"role": "admin"}).status_code == 403
        assert user_role(who) is not Role.ADMIN
    page = client_as(admin_user).get(USERS)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-user="otto-operator"' in html and 'data-user="mia-member"' in html
    assert 'href="/accounts/users/"' in html  # in the navigation, for admins
    assert 'href="/accounts/users/"' not in client_as(member).get("/").content.decode()


def test_an_invited_user_sets_their_password_through_a_link_that_works_once(client_as, admin_user):
    admin = client_as(admin_user)
    created = admin.post(
        USERS, {"username": "nina", "email": "nina@example.org", "role": "member", "how": "link"}
    )
    assert created.status_code == 302 and created["Location"] == USERS
    page = admin.get(USERS)
    link = _shown(page.content.decode())
    assert link and "/accounts/set-password/" in link
    assert page["Cache-Control"] == "no-store"
    assert _shown(admin.get(USERS).content.decode()) is None  # once
    nina = get_user_model().objects.get(username="nina")
    assert not nina.has_usable_password() and user_role(nina) is Role.MEMBER

    visitor = Client()
    form = visitor.get(link, follow=True)
    assert form.status_code == 200 and "Set your password" in form.content.decode()
    weak = visitor.post(
        form.redirect_chain[-1][0], {"new_password1": "123", "new_password2": "123"}
    )
    assert weak.status_code == 200 and "too short" in weak.content.decode()
    done = visitor.post(
        form.redirect_chain[-1][0],
        {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert done.status_code == 302 and done["Location"] == "/accounts/login/"
    assert _sign_in("nina", NEW_PASSWORD) is not None
    again = Client().get(link, follow=True)
    assert "does not work any more" in again.content.decode()

    create = AuditEntry.objects.get(action="user.create", target="nina")
    assert create.actor == admin_user and create.source == "web"
    assert AuditEntry.objects.get(action="password.set").actor_name == "nina"


def test_a_random_first_password_is_shown_once_and_signs_in(client_as, admin_user):
    admin = client_as(admin_user)
    admin.post(USERS, {"username": "omar", "role": "operator", "how": "password"})
    password = _shown(admin.get(USERS).content.decode())
    assert password and "/" not in password
    assert _sign_in("omar", password) is not None
    assert user_role(get_user_model().objects.get(username="omar")) is Role.OPERATOR


@pytest.mark.parametrize(
    "form, says",
    [
        ({"username": "mia-member", "role": "member", "how": "link"}, "already exists"),
        ({"username": "MIA-MEMBER", "role": "member", "how": "link"}, "already exists"),
        ({"username": "bad name!", "role": "member", "how": "link"}, "Enter a valid username"),
        ({"username": "x" * 151, "role": "member", "how": "link"}, "at most 150"),
        ({"username": "zed", "role": "superuser", "how": "link"}, "Select a valid choice"),
        ({"username": "zed", "role": "member", "how": "email"}, "Select a valid choice"),
    ],
)
def test_bad_input_gets_words_and_creates_nothing(client_as, admin_user, member, form, says):
    before = get_user_model().objects.count()
    answer = client_as(admin_user).post(USERS, form)
    assert answer.status_code == 400
    assert says in answer.content.decode()
    assert get_user_model().objects.count() == before


def test_a_role_change_is_audited_with_the_admin_and_the_last_admin_stays(
    client_as, admin_user, member
):
    admin = client_as(admin_user)
    admin.post(f"/accounts/users/{member.pk}/role/", {"role": "operator"})
    assert user_role(member) is Role.OPERATOR
    row = AuditEntry.objects.get(action="user.role", target_id=str(member.pk))
    assert row.actor == admin_user and row.after == {"role": "operator"}

    # The only admin cannot make themself a member: nobody could undo it.
    refused = admin.post(f"/accounts/users/{admin_user.pk}/role/", {"role": "member"}, follow=True)
    assert "last active admin" in refused.content.decode()
    assert user_role(admin_user) is Role.ADMIN
    bad = admin.post(f"/accounts/users/{member.pk}/role/", {"role": "root"}, follow=True)
    assert "Pick one of the roles" in bad.content.decode()
    assert admin.post("/accounts/users/999999/role/", {"role": "member"}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_deactivating_signs_out_everywhere_and_revokes_tokens_and_keys(
    client_as, admin_user, member, operator
):
    theirs = _sign_in(member.username, PASSWORD)
    assert theirs is not None
    assert theirs.get("/").status_code == 200
    token_create(user=member, name="ci")
    key_create(user=member, name="Open WebUI")
    key_create(user=operator, name="not theirs")

    admin = client_as(admin_user)
    done = admin.post(f"/accounts/users/{member.pk}/active/", {"active": "0"}, follow=True)
    assert "signed out everywhere; revoked: 1 API token, 1 gateway key" in done.content.decode()
    member.refresh_from_db()
    assert not member.is_active
    assert theirs.get("/").status_code == 302  # to the sign-in page
    assert _sign_in(member.username, PASSWORD) is None
    assert not ApiToken.objects.filter(user=member, revoked_at__isnull=True).exists()
    assert not GatewayKey.objects.filter(user=member, revoked_at__isnull=True).exists()
    assert GatewayKey.objects.filter(user=operator, revoked_at__isnull=True).exists()
    row = AuditEntry.objects.get(action="user.deactivate")
    assert row.actor == admin_user and "1 session(s) signed out" in row.message
    assert set(
        AuditEntry.objects.filter(action__endswith=".revoke").values_list("actor", flat=True)
    ) == {admin_user.pk}

    own = admin.post(f"/accounts/users/{admin_user.pk}/active/", {"active": "0"}, follow=True)
    assert "cannot deactivate your own account" in own.content.decode()
    admin.post(f"/accounts/users/{member.pk}/active/", {"active": "1"})
    member.refresh_from_db()
    assert member.is_active and _sign_in(member.username, PASSWORD) is not None
    assert AuditEntry.objects.filter(action="user.reactivate", actor=admin_user).exists()


def test_a_password_reset_signs_out_and_shows_a_new_link_once(client_as, admin_user, member):
    theirs = _sign_in(member.username, PASSWORD)
    assert theirs is not None
    admin = client_as(admin_user)
    answer = admin.post(f"/accounts/users/{member.pk}/reset/", {"how": "link"})
    assert answer.status_code == 302
    link = _shown(admin.get(USERS).content.decode())
    assert link and "/accounts/set-password/" in link
    assert theirs.get("/").status_code == 302
    assert _sign_in(member.username, PASSWORD) is None
    row = AuditEntry.objects.get(action="user.password-reset")
    assert row.actor == admin_user and "set-password link" in row.message
    # A GET on the POST-only URL changes nothing.
    admin.get(f"/accounts/users/{member.pk}/reset/")
    assert AuditEntry.objects.filter(action="user.password-reset").count() == 1


def test_the_command_line_records_the_machines_user_not_the_panel(db, capsys):
    import getpass

    call_command("createuser", "cli-made", "--role", "member")
    row = AuditEntry.objects.get(action="user.create", target="cli-made")
    assert row.source == "command" and row.actor is None
    assert row.actor_name == f"{getpass.getuser()} (manage.py createuser)"
    call_command("setrole", "cli-made", "operator")
    role = AuditEntry.objects.get(action="user.role", target="cli-made")
    assert role.source == "command" and "manage.py setrole" in role.actor_name
