"""Refusals leave a trace (issue 42): a request stopped before any model — no key, a bad
one, no role, a model the key may not use, a limit, a browser origin — is counted per user
and reason in Redis (one counter a kind, never a row a request), shown on the Usage page
and exported on /metrics. Real panel, real Redis, the official openai SDK."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.test import Client

from apps.gateway import store
from apps.gateway.models import Limit, UsageRecord

pytestmark = pytest.mark.django_db(transaction=True)
HI = [{"role": "user", "content": "Hi"}]


def test_every_refusal_is_counted_by_user_and_reason(panel, replica, member, operator,
                                                     admin_user, gateway_key):  # fmt: skip
    _sim, run = replica()
    Limit.objects.create(user=member, requests_per_minute=1)
    key = gateway_key(member)
    narrow = gateway_key(operator, models=["some-other-model"])
    client = openai.OpenAI(base_url=panel.v1, api_key=key, max_retries=0, timeout=60)
    name = run.served_name

    client.chat.completions.create(model=name, messages=HI, max_tokens=2)
    for _ in range(3):  # over one request a minute: refused each time, counted each time
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model=name, messages=HI, max_tokens=2)
    with pytest.raises(openai.PermissionDeniedError):
        openai.OpenAI(base_url=panel.v1, api_key=narrow, max_retries=0).chat.completions.create(
            model=name, messages=HI, max_tokens=2
        )
    assert httpx.get(panel.v1 + "/models").status_code == 401  # no key
    assert httpx.get(panel.v1 + "/models",
                     headers={"Authorization": "Bearer nonsense"}).status_code == 401  # fmt: skip
    unknown = "spg_" + "A" * 43  # shaped as a key, never issued
    assert httpx.get(panel.v1 + "/models",
                     headers={"Authorization": f"Bearer {unknown}"}).status_code == 401  # fmt: skip
    preflight = httpx.options(panel.v1 + "/chat/completions", headers={
        "Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert preflight.status_code == 403

    counted = store.refusals()
    assert counted[(str(member.pk), "requests_per_minute")] == 3
    assert counted[(str(operator.pk), "model_not_allowed")] == 1
    assert counted[("-", "missing_api_key")] == 1
    assert counted[("-", "invalid_api_key")] == 2  # a malformed key and an unknown one
    assert counted[("-", "origin_not_allowed")] == 1
    today = int(__import__("time").time()) // 86400
    assert store.refusals(today) == counted
    # One counter a kind: no usage row for a request no model saw.
    assert UsageRecord.objects.filter(status__in=[401, 403, 429]).count() == 0

    scraped = Client(REMOTE_ADDR="127.0.0.1").get("/metrics").content.decode()
    assert (f'sparkpanel_gateway_refused_requests_total{{code="requests_per_minute",'
            f'user="{member.username}"}} 3.0') in scraped  # fmt: skip
    assert (
        'sparkpanel_gateway_refused_requests_total{code="missing_api_key",user=""} 1.0' in scraped
    )

    web = Client()
    web.force_login(admin_user)
    page = web.get("/usage/").content.decode()
    table = page.split('data-testid="refused-table"')[1].split("</table>")[0]
    assert member.username in table and "over requests per minute" in table
    assert "(no key)" in table and "<td>3</td>" in table
    web.force_login(member)
    own = web.get("/usage/").content.decode().split('data-testid="refused-table"')[1]
    own = own.split("</table>")[0]
    assert "over requests per minute" in own
    assert "(no key)" not in own and "model not allowed" not in own  # only their own
