"""The audit log: every listed action leaves exactly one row (who, when, from where, what,
before and after), rows cannot be changed or deleted, and only admins see them."""

from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from apps.accounts.roles import Role
from apps.accounts.services import user_create, user_set_role
from apps.api.tokens import token_create, token_revoke
from apps.audit import context as audit_context
from apps.audit.models import AuditEntry, AuditLocked
from apps.audit.signals import ROLE_NAMES
from apps.benchmarks.models import Suite
from apps.gateway.keys import key_create, key_revoke
from apps.guard.agent import HostAgent
from apps.guard.watchdog import Watchdog
from apps.hosts.models import Host, SparkPair
from apps.runs.models import Run, RunState
from apps.runs.services import run_pin, run_restart, run_start, run_stop
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def rows(action: str | None = None) -> list[AuditEntry]:
    found = AuditEntry.objects.order_by("pk")
    return list(found.filter(action=action) if action else found)


def new_rows(before: int) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(pk__gt=before).order_by("pk"))


def last_pk() -> int:
    return AuditEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def signed_in(user) -> Client:
    client = Client(REMOTE_ADDR="192.0.2.10")
    client.force_login(user)
    return client


# --- runs --------------------------------------------------------------------------------


def test_run_start_stop_pin_and_restart_each_leave_one_row(
    sim_host, qwen, operator, django_capture_on_commit_callbacks
):
    mark = last_pk()
    with audit_context.acting_as(audit_context.Actor(user=operator, address="192.0.2.5",
                                                     source="web")):  # fmt: skip
        run = run_start(recipe=qwen, host=sim_host, user=operator)
        run_pin(run=run, user=operator)
        run_pin(run=run, user=operator)  # already pinned: nothing changes, no row
        run_pin(run=run, user=operator, pinned=False)
        run_stop(run=run, reason="done for today")
        Run.objects.filter(pk=run.pk).update(state=RunState.STOPPED)
        again = run_restart(run=run, user=operator)
    got = new_rows(mark)
    assert [r.action for r in got] == [
        "run.start",
        "run.pin",
        "run.unpin",
        "run.stop",
        "run.restart",
    ]
    start, *_, stop, restart = got
    assert (start.actor, start.actor_name, start.source, start.address) == (
        operator,
        operator.username,
        "web",
        "192.0.2.5",
    )
    assert start.target_type == "run" and start.target_id == str(run.pk)
    assert start.after == {"recipe": qwen.name, "host": sim_host.name}
    assert stop.message == "done for today"
    assert restart.target_id == str(run.pk) and again.pk != run.pk
    assert not AuditEntry.objects.filter(action="run.start", target_id=str(again.pk)).exists()


def test_the_watchdog_killing_a_run_leaves_one_row_as_the_watchdog(sim_host, qwen, operator):
    run = Run.objects.create(recipe=qwen, host=sim_host, state=RunState.LOADING, port=9,
                             started_by=operator)  # fmt: skip
    dog = Watchdog(warn_bytes=4 * 10**9, act_bytes=3 * 10**9, polls=1)
    decision = dog.observe(10**9, 0.0)
    assert decision.stop_run
    agent = HostAgent(sim_host.name)
    try:
        mark = last_pk()
        agent.act(decision)
    finally:
        agent.close()
    (row,) = new_rows(mark)
    assert (row.action, row.source, row.actor) == ("run.kill", "watchdog", None)
    assert row.target_id == str(run.pk) and "act threshold" in row.message


# --- configuration: recipes, hosts, pairs, suites -------------------------------------------


def test_a_recipe_created_edited_through_its_page_and_deleted(qwen, operator, sim_host):
    mark = last_pk()
    data = {k: v for k, v in qwen.__dict__.items() if not k.startswith("_")}
    data.update(pk=None, id=None, slug="qwen-copy", name="Qwen copy")
    copy = type(qwen).objects.create(**{k: v for k, v in data.items() if k not in ("pk",)})
    copy.max_model_len = 4096
    copy.save()
    copy.save()  # nothing changed: no row
    copy.delete()
    got = new_rows(mark)
    assert [r.action for r in got] == ["recipe.create", "recipe.edit", "recipe.delete"]
    created, edited, deleted = got
    assert created.after["name"] == "Qwen copy" and created.before is None
    assert edited.changes == {"max_model_len": [8192, 4096]}
    assert deleted.before["slug"] == "qwen-copy" and deleted.target == "Qwen copy"


def test_a_host_edited_in_django_admin_leaves_one_row_with_the_change_and_the_address(
    sim_host, admin_user
):
    client = signed_in(admin_user)
    page = client.get(f"/admin/hosts/host/{sim_host.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        data[name] = (
            value if not isinstance(value, list | dict) else __import__("json").dumps(value)
        )
    data["watchdog_warn_gb"] = "5.0"
    mark = last_pk()
    answer = client.post(f"/admin/hosts/host/{sim_host.pk}/change/", data)
    assert answer.status_code == 302, (
        answer.context["adminform"].form.errors if answer.context else answer
    )
    (row,) = new_rows(mark)
    assert row.action == "host.edit" and row.actor == admin_user
    assert row.source == "admin" and row.address == "192.0.2.10"
    assert row.changes == {"watchdog_warn_gb": [4.0, 5.0]}


def test_the_panels_own_host_updates_leave_no_row(sim_host):
    mark = last_pk()
    Host.objects.filter(pk=sim_host.pk).update(agent_seen_at=timezone.now())  # the agent's way
    sim_host.last_heartbeat = timezone.now()
    sim_host.agent_sample = {"mem_available": 1}
    sim_host.save()
    assert new_rows(mark) == []


def test_a_pair_and_a_suite_edited(sim_host, db):
    other = Host.objects.create(name="sim-other", engine=Host.Engine.PROCESS, simulated=True,
                                port_min=30000, port_max=30099)  # fmt: skip
    mark = last_pk()
    pair = SparkPair.objects.create(name="pair-1", head=sim_host, worker=other,
                                    head_link_address="127.0.0.2",
                                    worker_link_address="127.0.0.3")  # fmt: skip
    pair.link_mtu = 9000
    pair.save()
    suite = Suite.objects.create(name="audited", scenarios=[{"name": "s", "prompt_tokens": 8,
                                 "output_tokens": 2}], repetitions=1)  # fmt: skip
    suite.repetitions = 3
    suite.save()
    got = new_rows(mark)
    actions = [r.action for r in got if r.target_type in ("sparkpair", "suite")]
    assert actions == ["pair.create", "pair.edit", "suite.create", "suite.edit"]
    assert got[1].changes["link_mtu"][1] == 9000
    assert got[3].changes == {"repetitions": [1, 3]}


# --- accounts, tokens and keys ------------------------------------------------------------------


def test_a_user_created_and_given_a_role_leaves_one_row_each():
    mark = last_pk()
    user, _ = user_create(username="newbie", role=Role.MEMBER, password=PASSWORD)
    user_set_role(user=user, role=Role.OPERATOR)
    user_set_role(user=user, role=Role.OPERATOR)  # no change, no row
    got = new_rows(mark)
    assert [r.action for r in got] == ["user.create", "user.role"]
    assert got[0].after == {"username": "newbie", "role": "member"}
    assert got[1].changes == {"role": ["member", "operator"]}
    assert "password" not in str(got[0].after)


def test_a_role_changed_in_django_admin_is_one_row(
    admin_user, member, django_capture_on_commit_callbacks
):
    mark = last_pk()
    with django_capture_on_commit_callbacks(execute=True):
        member.groups.set([Group.objects.get(name="operator")])  # admin's save_m2m: a set()
    (row,) = new_rows(mark)
    assert row.action == "user.role" and row.changes == {"role": ["member", "operator"]}


def test_a_user_deactivated_in_admin_is_one_row(member):
    mark = last_pk()
    member.is_active = False
    member.save()
    (row,) = new_rows(mark)
    assert row.action == "user.edit" and row.changes == {"is_active": [True, False]}


def test_tokens_and_keys_created_and_revoked_without_their_secrets(member, redis_url):
    mark = last_pk()
    token, clear_token = token_create(user=member, name="laptop")
    token_revoke(token=token)
    token_revoke(token=token)  # already revoked: no row
    key, clear_key = key_create(user=member, name="agent")
    key_revoke(key=key)
    got = new_rows(mark)
    assert [r.action for r in got] == ["token.create", "token.revoke", "key.create", "key.revoke"]
    text = str([(r.before, r.after, r.message, r.target) for r in got])
    assert clear_token not in text and clear_key not in text and token.digest not in text


def test_the_api_names_the_token_user_and_the_address(operator, sim_host, qwen):
    _, clear = token_create(user=operator, name="ci")
    mark = last_pk()
    client = Client(REMOTE_ADDR="192.0.2.77")
    answer = client.post(
        "/api/v1/runs", {"recipe": qwen.slug, "host": sim_host.name},
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {clear}",
    )  # fmt: skip
    assert answer.status_code in (200, 201, 202), answer.content
    (row,) = [r for r in new_rows(mark) if r.action == "run.start"]
    assert (row.actor, row.source, row.address) == (operator, "api", "192.0.2.77")


# --- append-only, who may read it --------------------------------------------------------------


def test_rows_cannot_be_changed_or_deleted(admin_user):
    user_set_role(user=admin_user, role=Role.OPERATOR)
    row = AuditEntry.objects.latest("pk")
    row.message = "rewritten"
    with pytest.raises(AuditLocked):
        row.save()
    with pytest.raises(AuditLocked):
        row.delete()
    with pytest.raises(AuditLocked):
        AuditEntry.objects.filter(pk=row.pk).update(message="x")
    with pytest.raises(AuditLocked):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get(pk=row.pk).message == ""


def test_only_admins_see_the_page_the_csv_and_the_api(admin_user, operator, member):
    as_admin = audit_context.Actor(user=admin_user, address="192.0.2.1", source="admin")
    with audit_context.acting_as(as_admin):
        user_set_role(user=member, role=Role.OPERATOR)
        user_set_role(user=member, role=Role.MEMBER)
    for user in (operator, member):
        client = signed_in(user)
        assert client.get("/audit/").status_code == 403
        assert client.get("/audit/export.csv").status_code == 403
        assert client.get("/api/v1/audit").status_code == 403
        assert b'href="/audit/"' not in client.get("/").content
    client = signed_in(admin_user)
    page = client.get("/audit/?action=user.role")
    assert page.status_code == 200 and page.content.count(b"<code>user.role</code>") == 2
    assert b'href="/audit/"' in client.get("/").content
    exported = client.get("/audit/export.csv?actor=" + admin_user.username)
    assert exported["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert [(r["action"], r["target"], r["address"]) for r in table] == [
        ("user.role", member.username, "192.0.2.1")
    ] * 2
    assert table[0]["changes"] == '{"role": ["operator", "member"]}'  # newest first
    api = client.get("/api/v1/audit?action=user&limit=10").json()
    assert api["count"] >= 2 and all(i["action"].startswith("user.") for i in api["items"])
    # the admin can read rows there, but Django admin offers no way to change or delete them
    listing = client.get("/admin/audit/auditentry/")
    assert listing.status_code == 200 and b"Delete selected" not in listing.content
    row = AuditEntry.objects.latest("pk")
    assert (
        client.post(f"/admin/audit/auditentry/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    )


def test_bad_filters_are_explained_not_a_500(admin_user):
    client = signed_in(admin_user)
    page = client.get("/audit/?since=yesterday&q=" + "x" * 500)
    assert page.status_code == 200
    assert b"since: a date as YYYY-MM-DD" in page.content and b"q: at most 100" in page.content
    assert client.get("/api/v1/audit?since=yesterday").status_code == 422
    assert client.get("/audit/?page=999999").status_code == 200


def test_the_role_names_match_the_roles():
    assert tuple(r.value for r in Role) == ROLE_NAMES


def test_the_settings_kept_in_the_database_are_audited(qwen):
    from apps.gateway.models import Limit, ModelAlias
    from apps.recipes.models import HangPolicy

    mark = last_pk()
    policy = HangPolicy.objects.create(recipe=qwen)
    policy.action = HangPolicy.Action.RESTART
    policy.save()
    limit = Limit.objects.create(role="member", requests_per_minute=60)
    limit.requests_per_minute = 30
    limit.save()
    alias = ModelAlias.objects.create(name="team-default", recipe=qwen)
    alias.delete()
    got = [(r.action, r.changes) for r in new_rows(mark)]
    assert got[0][0] == "guard-settings.create"
    assert got[1] == ("guard-settings.edit", {"action": ["alert", "restart"]})
    assert got[2][0] == "limit.create"
    assert got[3] == ("limit.edit", {"requests_per_minute": [60, 30]})
    assert [a for a, _ in got[4:]] == ["alias.create", "alias.delete"]
