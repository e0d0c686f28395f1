import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.accounts.roles import (
    EDIT_RECIPES,
    MANAGE_HOSTS,
    OPERATE_RUNS,
    POST_NOTICES,
    QUEUE_BENCHMARKS,
    ROLE_CAPABILITIES,
    USE_CHAT,
    VIEW_PANEL,
    Role,
)
from apps.accounts.services import user_role, user_set_role

pytestmark = pytest.mark.django_db


def test_migrate_creates_the_three_role_groups_with_exactly_their_permissions():
    for role, codenames in ROLE_CAPABILITIES.items():
        group = Group.objects.get(name=role.value)
        assert set(group.permissions.values_list("codename", flat=True)) == set(codenames)


def test_member_views_queues_and_chats_but_cannot_operate(member):
    assert user_role(member) is Role.MEMBER
    for perm in (VIEW_PANEL, QUEUE_BENCHMARKS, USE_CHAT):
        assert member.has_perm(perm)
    for perm in (OPERATE_RUNS, EDIT_RECIPES, POST_NOTICES, MANAGE_HOSTS):
        assert not member.has_perm(perm)
    assert not member.is_staff


def test_operator_starts_runs_and_edits_recipes_but_does_not_manage_hosts(operator):
    assert operator.has_perm(OPERATE_RUNS)
    assert operator.has_perm(EDIT_RECIPES)
    assert not operator.has_perm(MANAGE_HOSTS)
    assert not operator.is_staff


def test_admin_can_do_everything_and_reach_django_admin(admin_user):
    assert user_role(admin_user) is Role.ADMIN
    assert admin_user.has_perm(MANAGE_HOSTS)
    assert admin_user.is_staff and admin_user.is_superuser


def test_changing_role_replaces_the_old_one(member):
    user_set_role(user=member, role=Role.OPERATOR)
    member.refresh_from_db()
    assert list(member.groups.values_list("name", flat=True)) == ["operator"]
    user_set_role(user=member, role=Role.MEMBER)
    member = type(member).objects.get(pk=member.pk)  # fresh permission cache
    assert not member.has_perm(OPERATE_RUNS)


def test_createuser_command_creates_a_user_with_a_role_and_prints_a_generated_password(capsys):
    call_command("createuser", "newbie", "--role", "operator")
    out = capsys.readouterr().out
    assert "Created operator 'newbie'" in out
    password = out.split("Password (shown once): ")[1].strip()
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="newbie")
    assert user.check_password(password)
    assert user_role(user) is Role.OPERATOR


def test_createuser_refuses_a_duplicate_and_a_weak_password(member, monkeypatch):
    with pytest.raises(CommandError, match="already exists"):
        call_command("createuser", member.username, "--role", "member")
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("123\n"))
    with pytest.raises(CommandError, match="password rejected"):
        call_command("createuser", "weak", "--role", "member", "--password-stdin")
