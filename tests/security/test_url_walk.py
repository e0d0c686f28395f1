"""Every URL of the project, walked as an anonymous visitor, a role-less account and a member;
and every operation of the JSON API, walked with no token, a role-less token and a member's.

tests/accounts/test_access.py walks the argument-free pages for the login redirect; this
walk fills in every pattern (converters, the API, the unnamed catch-all), tries every
method, and checks the roles too. It is built from the resolver and the OpenAPI schema, so
a new URL is walked the day it is added: if it forgets its protection, a test here fails
and names it.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from apps.api.tokens import token_create
from apps.recipes.yaml_io import recipes_to_yaml
from tests.recipes.factories import recipe_data
from tests.security.urlwalk import (
    api_name,
    api_operations,
    api_request,
    concrete_path,
    db_snapshot,
    routes,
    snapshot_diff,
)

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")
# The walk must never silently walk nothing: these are floors, not the current counts.
MIN_ROUTES = 60
MIN_ROUTES_WITH_PARAMETERS = 20
MIN_API_OPERATIONS = 20

# Open without a login, each for a stated reason and each with its own check below.
PUBLIC = {
    "login": "the sign-in form itself",
    "healthz": "liveness for compose and load balancers; says only ok/database/redis",
    "panel-metrics": "Prometheus; needs METRICS_TOKEN or an allowed network instead",
    "api/^(?P<rest>.*)$": "the API's JSON 404 for unknown paths; answers nothing else",
    "set-password": "a set-password link: the signed link is the credential (works once)",
}
# API routes that are browser pages, not API calls: they send a visitor on (to the login
# page, or to the docs page which then does) instead of answering 401.
API_BROWSER_PAGES = {"api-v1:openapi-view": "/accounts/login/", "api-v1:api-root": "/api/v1/docs"}
# The API's own routes that are not operations of its schema.
API_DOCUMENTS = {"api-v1:openapi-json", *API_BROWSER_PAGES}

# Member POSTs that are member actions on the member's own things (or change nothing).
MEMBER_MAY_POST = {
    "logout": "signing out",
    "profile": "creates the member's own API token",
    "webhook-add": "adds the member's own webhook",
    "email-alerts-save": "chooses the member's own e-mail alerts",
    "email-alerts-test": "sends the member a test e-mail (changes nothing)",
    "gateway-key-create": "creates the member's own gateway key",
    "benchmark-queue": "members queue benchmarks",
    "benchmark-import": "members import results they measured as read-only jobs",
    "chat-new": "members chat",
    "chat-compare-new": "members compare ready runs side by side (an empty form starts nothing)",
    "chat-preset-new": "saves a system-prompt preset the team shares (an empty form saves nothing)",
    "recipe-plan": "the live planner preview; computes, saves nothing",
    "password-change": "changes the member's own password (an empty form changes nothing)",
}
# Member capabilities on a single object: on someone else's object they are refused (403,
# or 404: the object is not theirs to see), and nothing changes.
OBJECT_SCOPED = {
    "token-revoke",
    "gateway-key-revoke",
    "webhook-delete",
    "webhook-test",
    "chat-send",  # gives the owner's own message back to the box (sends nothing)
    "chat-settings",
    "chat-switch-run",
    "chat-load",  # loads the owner's conversation's on-demand model
    "chat-share",
    "chat-unshare",
    "chat-preset-apply",
    "chat-preset-delete",
    "chat-compare-send",  # gives the owner's own prompt back to the box (sends nothing)
    "chat-compare-settings",
    "chat-compare-vote",
    # The page answers a refused cancel with a message and a redirect (the API answers 403);
    # what matters is that the job stays queued.
    "benchmark-cancel",
    # Authors may delete their own notices; someone else's is refused.
    "notice-delete",
}
# Admin actions of the panel's own pages (not Django admin): members and operators are refused
# (403) and nothing changes — walked below by the member walk, and by an operator here.
ADMIN_POSTS = {
    "host-retire": "retires a host (manage_hosts): no new runs, jobs or loads",
    "host-return": "brings a retired host back into service (manage_hosts)",
    "gateway-limits-role": "sets a role's gateway limits (manage_users)",
    "gateway-limits-user-add": "sets a user's gateway limits (manage_users)",
    "gateway-limits-user": "sets or removes a user's gateway limits (manage_users)",
    "gateway-limits-key": "sets a key's own gateway limits (manage_users)",
}
# Read-only pages without a method check: a POST renders the page like a GET (the walk still
# checks that nothing changed).
ANSWERS_POST_LIKE_GET: set[str] = set()
# API writes a member may call (by the operation's function name).
MEMBER_API_WRITES = {
    "queue_job": "members queue benchmarks",
    "plan": "computes, saves nothing",
    "startup_plan": "predicts what vLLM will do with a command; saves nothing",
    "keys_create": "creates the member's own gateway key",
}
# API writes on the member's own objects: someone else's is not found (404), and nothing
# changes.
API_OBJECT_SCOPED = {"keys_revoke"}
# API reads a member may not make: refused (403 "forbidden").
ADMIN_API_READS = {"list_audit": "the audit log: admins only"}


def _walk(world) -> list[tuple]:
    found = routes()
    assert len(found) >= MIN_ROUTES, f"the URL walk found only {len(found)} routes"
    assert sum(1 for r in found if r.params) >= MIN_ROUTES_WITH_PARAMETERS
    walked, seen = [], set()
    for route in found:
        path = concrete_path(route, world)
        if path not in seen:  # one path, several API methods: one pattern serves them all
            seen.add(path)
            walked.append((route, path))
    return walked


def test_the_walk_covers_every_pattern_and_fills_parameters_with_real_objects(world):
    walked = {route.key: concrete_path(route, world) for route in routes()}
    assert walked["run-stop"] == f"/runs/{world['run'].pk}/stop/"
    assert walked["recipe-edit"] == f"/recipes/{world['recipe'].slug}/edit/"
    assert walked["chat-message"] == f"/chat/messages/{world['message'].pk}.json"
    assert walked["api-v1:get_host"] == f"/api/v1/hosts/{world['host'].name}"
    assert walked["api-v1:cancel_job"] == f"/api/v1/jobs/{world['job'].pk}/cancel"
    assert set(PUBLIC) | {"logout", *API_BROWSER_PAGES} <= set(walked)
    assert set(MEMBER_MAY_POST) | OBJECT_SCOPED <= set(walked), "a listed exception is stale"
    assert set(ADMIN_POSTS) <= set(walked), "a listed admin action is stale"


# --- (a) anonymous ----------------------------------------------------------------------------


def _public_is_narrow(key: str, method: str, client: Client, path: str) -> str | None:
    if key == "login":
        return None  # the form (200), a failed sign-in (200), or 405
    if key == "set-password":
        # A link nobody made: it says so and sets nothing (Django checks the signed token).
        response = getattr(client, method)(path, follow=True)
        if response.status_code == 405:
            return None
        if response.status_code != 200 or "does not work any more" not in response.content.decode():
            return f"{method.upper()} {path} → {response.status_code} without a valid link"
        return None
    response = getattr(client, method)(path, REMOTE_ADDR="192.0.2.7")
    if key == "healthz":
        if method == "get":
            if set(response.json()) != {"ok", "database", "redis"}:
                return f"/healthz says more than ok/database/redis: {response.content[:200]}"
        elif response.status_code != 405:
            return f"{method.upper()} /healthz → {response.status_code}"
    elif key == "panel-metrics":
        # From a network that is not allowed, without the token: refused.
        if response.status_code not in (403, 405):
            return f"{method.upper()} /metrics from 192.0.2.7 → {response.status_code}"
    elif response.status_code != 404 or response.json()["error"]["code"] != "not_found":
        return f"{method.upper()} {path} → {response.status_code}"
    return None


def test_anonymous_requests_get_the_login_page_or_401_never_a_page(world):
    client = Client()
    login = reverse("login")
    problems = []
    for route, path in _walk(world):
        for method in METHODS:
            if route.key in PUBLIC:
                problem = _public_is_narrow(route.key, method, client, path)
                if problem:
                    problems.append(problem)
                continue
            response = getattr(client, method)(path)
            status = response.status_code
            where = f"{method.upper()} {path} [{route.key}] → {status}"
            if route.key in API_BROWSER_PAGES:
                if status != 302 or not response["Location"].startswith(
                    API_BROWSER_PAGES[route.key]
                ):
                    problems.append(where)
            elif route.is_api:
                if status == 405:
                    continue  # no such operation on this path
                if status != 401 or response.json()["error"]["code"] != "unauthenticated":
                    problems.append(where)
            elif status != 302 or not response["Location"].startswith(login + "?next="):
                problems.append(where)
    assert not problems, "reachable without signing in:\n" + "\n".join(problems)


# --- (c) an account without a role -----------------------------------------------------------


def test_an_account_without_a_role_gets_403_everywhere(world, outsider, client_as):
    client = client_as(outsider)
    problems = []
    for route, path in _walk(world):
        if route.key in PUBLIC or route.key == "logout":
            continue  # public on purpose / signing out is allowed (test_access.py)
        if route.is_api and route.key not in API_DOCUMENTS:
            continue  # API operations validate input before the role check: walked below
        for method in METHODS:
            response = getattr(client, method)(path)
            status = response.status_code
            where = f"{method.upper()} {path} [{route.key}] → {status}"
            if route.key == "api-v1:api-root":
                ok = status == 302 and response["Location"] == "/api/v1/docs"
            elif route.is_api:
                ok = status == 405 or (status == 403 and b"no role" in response.content)
            else:
                ok = status == 403 and b"no role yet" in response.content.lower()
            if not ok:
                problems.append(where)
    assert not problems, "an account without a role reached:\n" + "\n".join(problems)


# --- (b) a member and the operator/admin actions --------------------------------------------


def _member_post_data(world) -> dict[str, dict]:
    recipe, run, host = world["recipe"], world["run"], world["host"]
    imported = recipes_to_yaml([recipe]).replace(recipe.slug, "member-import")
    return {
        "notice-create": {"message": "a member was here", "level": "info"},
        "recipe-create": recipe_data(name="Member recipe"),
        "recipe-edit": recipe_data(name="Edited by a member"),
        "recipe-import": {"text": imported.replace(recipe.name, "Member import")},
        "recipe-wizard": {**recipe_data(name="Wizard by a member"), "action": "save", "step": "3"},
        "run-start": {"recipe": recipe.pk, "host": host.pk},
        "benchmark-suite-new": {
            "name": "member suite",
            "scenarios_text": "short: 200/128",
            "repetitions": "1",
            "warmup_requests": "1",
            "requests_per_level": "2",
            "sweep_prompt_tokens": "200",
            "sweep_output_tokens": "16",
        },
        "benchmark-suite-edit": {
            "name": "renamed by a member",
            "scenarios_text": "s: 1/1",
            "repetitions": "1",
            "warmup_requests": "0",
            "requests_per_level": "1",
            "sweep_prompt_tokens": "1",
            "sweep_output_tokens": "1",
        },
        "chat-settings": {
            "title": "hijacked",
            "system_prompt": "",
            "temperature": "0.1",
            "top_p": "1",
            "max_tokens": "5",
        },
        "chat-switch-run": {"run": run.pk},
        "benchmark-cancel": {},
    }


def test_a_member_cannot_do_operator_or_admin_actions_and_nothing_changes(world, member, client_as):
    client = client_as(member)
    data = _member_post_data(world)
    problems = []
    walked = 0
    for route, path in _walk(world):
        if route.is_api or route.key in PUBLIC or route.key in MEMBER_MAY_POST:
            continue  # the API has its own walk below; the rest are listed above with reasons
        walked += 1
        before = db_snapshot()
        response = client.post(path, data.get(route.key, {}))
        status = response.status_code
        changed = snapshot_diff(before, db_snapshot())
        where = f"POST {path} [{route.key}] → {status}"
        if changed:
            problems.append(f"{where} changed {', '.join(changed)}")
        if route.key in OBJECT_SCOPED:
            allowed = {403, 404, 302} if route.key == "benchmark-cancel" else {403, 404}
        elif route.key in ANSWERS_POST_LIKE_GET:
            allowed = {200}
        else:
            allowed = {403, 405}  # 405: a read-only page, the method is refused first
        if status not in allowed:
            problems.append(where)
        if status == 403 and b"does not allow this action" not in response.content:
            problems.append(f"{where} without the panel's 403 page")
    assert walked >= 30
    assert not problems, "a member could act beyond their role:\n" + "\n".join(problems)
    world["job"].refresh_from_db()
    assert world["job"].state == "queued"


def test_an_operator_cannot_retire_or_bring_back_a_host(world, operator, client_as):
    """The world's host is busy (a ready run), so a retire would be refused anyway: an idle
    host and a retired one show that the capability, not the state, refuses the operator."""
    from django.utils import timezone

    from apps.hosts.models import Host

    idle = Host.objects.create(name="sec-idle", port_min=21000, port_max=21001)
    retired = Host.objects.create(name="sec-retired", port_min=21002, port_max=21003,
                                  retired_at=timezone.now())  # fmt: skip
    client = client_as(operator)
    for key, host in (("host-retire", idle), ("host-return", retired)):
        before = db_snapshot()
        response = client.post(reverse(key, args=[host.name]))
        assert response.status_code == 403, (key, response.status_code)
        assert b"does not allow this action" in response.content
        assert not snapshot_diff(before, db_snapshot()), key


def test_django_admin_is_for_admins_only(world, member, operator, outsider, client_as):
    """Hosts (mounts, images, networks) are edited only there; nobody else gets in."""
    for user in (member, operator, outsider):
        client = client_as(user)
        before = db_snapshot()
        page = client.get("/admin/hosts/host/")
        add = client.post("/admin/hosts/host/add/", {"name": "rogue", "engine": "docker"})
        change = client.post(
            f"/admin/hosts/host/{world['host'].pk}/change/",
            {"name": world["host"].name, "hf_cache_path": "/", "docker_network": "host"},
        )
        # Not staff: sent to the admin sign-in (or, without a role, the 403 page).
        for response in (page, add, change):
            assert response.status_code in (302, 403), response.status_code
            if response.status_code == 302:
                assert "/admin/login/" in response["Location"]
        assert not snapshot_diff(before, db_snapshot())


# --- the API, operation by operation ---------------------------------------------------------


def _call(client: Client, method: str, url: str, body, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kwargs = {"headers": headers}
    if body is not None:
        kwargs |= {"data": json.dumps(body), "content_type": "application/json"}
    return getattr(client, method)(url, **kwargs)


def test_the_api_schema_walk_covers_every_api_route():
    operations = api_operations()
    assert len(operations) >= MIN_API_OPERATIONS, f"the API walk found {len(operations)} operations"
    names = {api_name(op) for _, _, op in operations}
    named = {r.name for r in routes() if r.key.startswith("api-v1:")}
    assert {"list_hosts", "start_run", "me"} <= names
    assert named - {key.split(":")[1] for key in API_DOCUMENTS} <= names


def test_every_api_operation_needs_a_token_and_a_role(world, outsider):
    _, outsider_token = token_create(user=outsider, name="no role")
    client = Client()
    problems = []
    for method, path, op in api_operations():
        url, body = api_request(method, path, op, world)
        anonymous = _call(client, method, url, body, None)
        if anonymous.status_code != 401 or "Bearer" not in anonymous.get("WWW-Authenticate", ""):
            problems.append(f"no token: {method.upper()} {url} → {anonymous.status_code}")
        roleless = _call(client, method, url, body, outsider_token)
        if roleless.status_code != 403:
            problems.append(f"no role: {method.upper()} {url} → {roleless.status_code}")
    assert not problems, "\n".join(problems)


def test_a_members_token_reads_everything_but_writes_only_member_actions(world, member):
    _, token = token_create(user=member, name="member ci")
    client = Client()
    problems = []
    writes = 0
    for method, path, op in api_operations():
        url, body = api_request(method, path, op, world)
        if method == "get":
            response = _call(client, method, url, body, token)
            if api_name(op) in ADMIN_API_READS:
                if response.status_code != 403 or response.json()["error"]["code"] != "forbidden":
                    problems.append(f"{method.upper()} {url} → {response.status_code}")
                continue
            if response.status_code != 200:
                problems.append(f"{method.upper()} {url} → {response.status_code}")
            continue
        if api_name(op) in MEMBER_API_WRITES:
            continue
        writes += 1
        before = db_snapshot()
        response = _call(client, method, url, body, token)
        changed = snapshot_diff(before, db_snapshot())
        if api_name(op) in API_OBJECT_SCOPED and response.status_code == 404:
            pass
        elif response.status_code != 403 or response.json()["error"]["code"] != "forbidden":
            problems.append(
                f"{method.upper()} {url} → {response.status_code}: {response.content[:200]}"
            )
        if changed:
            problems.append(f"{method.upper()} {url} changed {', '.join(changed)}")
    assert writes >= 6  # create, import, update, start, stop, cancel someone else's job
    assert not problems, "\n".join(problems)
