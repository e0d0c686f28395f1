"""Usage: the page, the CSV, the API and the panel's /metrics agree with the requests."""

from __future__ import annotations

import csv
import io

import openai
import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Api, api_client

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


def _ask(panel, key: str, model: str, n: int, max_tokens: int) -> int:
    client = openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)
    total = 0
    for _ in range(n):
        answer = client.chat.completions.create(model=model, messages=HI, max_tokens=max_tokens)
        total += answer.usage.prompt_tokens + answer.usage.completion_tokens
    return total


def test_usage_page_csv_api_and_metrics(panel, replica, member, operator, admin_user,
                                        gateway_key):  # fmt: skip
    _, run = replica()
    model = run.served_name
    mine = _ask(panel, gateway_key(member), model, 3, 5)
    theirs = _ask(panel, gateway_key(operator), model, 2, 7)

    page = Client()
    page.force_login(member)
    html = page.get("/usage/").content.decode()
    assert "<strong>3</strong> requests" in html and operator.username not in html
    assert page.post("/usage/").status_code == 405
    exported = page.get("/usage.csv?days=1")
    assert exported["content-disposition"].startswith("attachment;")
    rows = list(csv.DictReader(io.StringIO(exported.content.decode())))
    assert len(rows) == 3 and {r["user"] for r in rows} == {member.username}
    assert sum(int(r["prompt_tokens"]) + int(r["completion_tokens"]) for r in rows) == mine

    admin = Client()
    admin.force_login(admin_user)
    everyone = admin.get("/usage/?days=1&by=hour").content.decode()
    assert "<strong>5</strong> requests" in everyone and operator.username in everyone
    assert "<strong>0</strong> requests" in admin.get("/usage/?user=nobody").content.decode()

    api = api_client(member)
    summary = api.get("/usage", days=1).json()
    assert summary["totals"]["requests"] == 3
    assert summary["by_user_and_model"] == [{
        "user": member.username, "model": model, "requests": 3, "prompt": mine - 15,
        "completion": 15, "total": mine, "errors": 0, "cancelled": 0}]  # fmt: skip
    assert sum(b["total"] for b in summary["series"]) == mine
    assert api.get("/usage", user="all").status_code == 403
    every = api_client(admin_user).get("/usage", user="all").json()
    assert every["totals"]["requests"] == 5 and every["user"] is None
    assert api_client(admin_user).get("/usage", user="nobody").status_code == 404
    assert api.get("/usage", days=0).status_code == 422

    scraped = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    families = {f.name: f for f in text_string_to_metric_families(scraped)}
    requests = {(s.labels["user"], s.labels["model"]): s.value
                for s in families["sparkpanel_gateway_requests"].samples
                if s.name.endswith("_total")}  # fmt: skip
    assert requests == {(member.username, model): 3, (operator.username, model): 2}
    completion = {s.labels["user"]: s.value
                  for s in families["sparkpanel_gateway_completion_tokens"].samples
                  if s.name.endswith("_total")}  # fmt: skip
    assert completion == {member.username: 15, operator.username: 14}
    assert theirs > 14


def test_keys_through_the_api(panel, replica, member, outsider):
    _, run = replica()
    api = api_client(member)
    created = api.post("/gateway/keys", {"name": "notebook", "models": [run.served_name]})
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["key"].startswith("spg_") and body["models"] == [run.served_name]
    assert _ask(panel, body["key"], run.served_name, 1, 2) > 0
    listed = api.get("/gateway/keys").json()
    assert [k["name"] for k in listed] == ["notebook"] and "key" not in listed[0]
    assert listed[0]["requests"] == 1 and listed[0]["tokens"] > 0
    assert api.call("delete", f"/gateway/keys/{body['id']}").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        _ask(panel, body["key"], run.served_name, 1, 2)
    # Someone else's key is not found; a role-less account may not create any.
    assert api_client(outsider).call("delete", f"/gateway/keys/{body['id']}").status_code == 403
    assert Api().get("/gateway/keys").status_code == 401
    assert api.post("/gateway/keys", {"name": ""}).status_code == 422
    assert api.post("/gateway/keys", {"name": "x", "models": ["m" * 300]}).status_code == 422
    # Not an object, or a key the schema does not know (a typo), is refused, not defaulted.
    assert api.post("/gateway/keys", [None, None]).status_code == 422
    assert api.post("/gateway/keys", {"nmae": "typo"}).status_code == 422
    assert len(api.get("/gateway/keys").json()) == 1  # nothing was created by those


def test_the_models_page_shows_replicas_and_operators_set_aliases(panel, replica, member, operator,
                                                                  qwen, gateway_key):  # fmt: skip
    from apps.gateway.models import ModelAlias

    _, run = replica()
    page = Client()
    page.force_login(operator)
    html = page.get("/gateway/").content.decode()
    assert run.served_name in html and f"run {run.pk} on {run.host.name}" in html
    added = page.post("/gateway/", {"name": "team-default", "recipe": qwen.pk})
    assert added.status_code == 302 and ModelAlias.objects.filter(name="team-default").exists()
    again = page.post("/gateway/", {"name": "team-default", "recipe": qwen.pk})
    assert again.status_code == 400 and "exists already" in again.content.decode()
    bad = page.post("/gateway/", {"name": "no spaces allowed", "recipe": qwen.pk})
    assert bad.status_code == 400
    client = openai.OpenAI(base_url=panel.v1, api_key=gateway_key(member), max_retries=0)
    assert "team-default" in [m.id for m in client.models.list().data]

    visitor = Client()
    visitor.force_login(member)
    assert "team-default" in visitor.get("/gateway/").content.decode()
    assert visitor.post("/gateway/", {"name": "mine", "recipe": qwen.pk}).status_code == 403
    alias = ModelAlias.objects.get(name="team-default")
    assert visitor.post(f"/gateway/aliases/{alias.pk}/delete/").status_code == 403
    assert page.post(f"/gateway/aliases/{alias.pk}/delete/").status_code == 302
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="team-default", messages=HI, max_tokens=2)
