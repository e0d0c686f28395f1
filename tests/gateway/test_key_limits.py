"""A key's own limits on top of its user's (issue 43): through the real gateway (uvicorn,
the official openai SDK, a real sparksim behind a ready run) and real Redis — a key's
limit refuses while the user has room, the user's still refuses across keys, both sets
of counters settle; and the Limits page where admins set them (403 for anyone else,
bounded fields, audited, applied at the next request)."""

from __future__ import annotations

import asyncio

import openai
import pytest

from apps.audit.models import AuditEntry
from apps.gateway import store, usage
from apps.gateway.models import GatewayKey, Limit, UsageRecord
from tests.gateway.test_limits import HI, _async

pytestmark = pytest.mark.django_db(transaction=True)
LIMITS = "/gateway/limits/"


async def _say(client, model, stream=False, **kwargs):
    """ "ok", or the refusal: (status, code, its message, Retry-After)."""
    try:
        answer = await client.chat.completions.create(model=model, messages=HI, stream=stream,
                                                      **kwargs)  # fmt: skip
        if stream:
            async for _ in answer:
                pass
        return "ok"
    except openai.RateLimitError as exc:
        return (
            429,
            exc.body["code"],
            exc.body["message"],
            int(exc.response.headers["retry-after"]),
        )


def _burst(panel, key: str, n: int, **kwargs) -> list:
    async def go():
        async with _async(panel, key)() as client:
            return await asyncio.gather(*(_say(client, **kwargs) for _ in range(n)))

    return asyncio.run(go())


def _key(gateway_key, user, name: str, **limits) -> tuple[str, GatewayKey]:
    clear = gateway_key(user, name=name, limits=limits)
    return clear, GatewayKey.objects.get(user=user, name=name)


def test_a_keys_own_limit_refuses_while_its_user_has_room(panel, replica, member, gateway_key):
    _, run = replica()
    Limit.objects.create(role="member", requests_per_minute=100)
    small, key = _key(gateway_key, member, "script", requests_per_minute=2)
    other, _ = _key(gateway_key, member, "laptop")
    answers = _burst(panel, small, 5, model=run.served_name, max_tokens=2)
    assert answers.count("ok") == 2, answers
    refused = [a for a in answers if a != "ok"]
    assert {a[1] for a in refused} == {"requests_per_minute"}
    assert all("this key's limit of 2 requests per minute" in a[2] for a in refused), refused
    assert all(1 <= a[3] <= 60 for a in refused)  # Retry-After: when its oldest leaves
    # The user has room: their other key works, and the refusals took none of it.
    assert _burst(panel, other, 1, model=run.served_name, max_tokens=2) == ["ok"]
    assert store.requests_last_minute(member.pk) == 3
    assert store.requests_last_minute(key_id=key.pk) == 2


def test_the_users_limit_still_refuses_across_two_keys(panel, replica, member, gateway_key):
    _, run = replica()
    Limit.objects.create(user=member, requests_per_minute=3)
    roomy, _ = _key(gateway_key, member, "roomy", requests_per_minute=50)
    plain, _ = _key(gateway_key, member, "plain")
    assert _burst(panel, roomy, 2, model=run.served_name, max_tokens=2) == ["ok", "ok"]
    assert _burst(panel, plain, 1, model=run.served_name, max_tokens=2) == ["ok"]
    for clear in (roomy, plain):
        (refused,) = _burst(panel, clear, 1, model=run.served_name, max_tokens=2)
        assert refused[:2] == (429, "requests_per_minute")
        # The account's words, as before keys had limits of their own.
        assert refused[2].startswith("Over your limit of 3 requests per minute"), refused


def test_a_keys_counters_settle_like_its_users(panel, replica, member, gateway_key):
    """In flight back to 0 on both sets, each token reservation replaced by the tokens used
    (on the key's budget and the user's alike), a refused request leaves no trace."""
    _, run = replica(time_scale=2)  # answers long enough to overlap
    Limit.objects.create(role="member", tokens_per_day=1_000_000, requests_per_minute=100)
    clear, key = _key(gateway_key, member, "busy", concurrent_streams=2, tokens_per_day=20_000)
    answers = _burst(panel, clear, 6, model=run.served_name, stream=True, max_tokens=40)
    assert answers.count("ok") == 2, answers
    assert {a[1] for a in answers if a != "ok"} == {"concurrent_requests"}
    assert all("this key's limit of 2 requests at once" in a[2] for a in answers if a != "ok")
    assert store.in_flight(key_id=key.pk) == 0
    assert store.requests_last_minute(member.pk) == 2  # the refused ones took no slot
    usage.drain()
    rows = UsageRecord.objects.filter(key=key, status=200)
    spent = sum(r.prompt_tokens + r.completion_tokens for r in rows)
    assert len(rows) == 2 and spent > 0
    # Reserved at admission: each prompt's bound + 40; refunded down to what was used.
    assert store.tokens_used_today(key_id=key.pk) == spent
    assert store.tokens_used_today(member.pk) == spent


def test_a_keys_token_budget_caps_the_answer_and_then_refuses(panel, replica, member,
                                                              gateway_key):  # fmt: skip
    _, run = replica()
    clear, key = _key(gateway_key, member, "tight", tokens_per_day=400)
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0)
    # The key's budget is smaller than max_tokens: the answer is capped to what is left
    # (the budget less the prompt's bound, the body's bytes).
    answer = client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=900)
    assert answer.usage.completion_tokens < 400
    for _ in range(10):
        result = _burst(panel, clear, 1, model=run.served_name, max_tokens=900)[0]
        if result != "ok":
            break
    assert result[:2] == (429, "tokens_per_day")
    assert result[2].startswith("This key's daily 400 tokens are used"), result
    usage.drain()
    spent = sum(r.total_tokens for r in UsageRecord.objects.filter(key=key, status=200))
    assert spent <= 400 and store.tokens_used_today(key_id=key.pk) == spent
    assert store.tokens_used_today(member.pk) is None  # the user has no budget: no counter


def test_only_admins_see_or_change_limits(client_as, admin_user, operator, member,
                                          gateway_key):  # fmt: skip
    _, key = _key(gateway_key, member, "mine")
    posts = {
        f"{LIMITS}roles/member/": {"role-member-tokens_per_day": "1"},
        f"{LIMITS}users/": {"add-username": member.username, "add-tokens_per_day": "1"},
        f"{LIMITS}users/{member.pk}/": {f"user-{member.pk}-tokens_per_day": "1"},
        f"{LIMITS}keys/{key.pk}/": {f"key-{key.pk}-tokens_per_day": "1"},
    }
    for who in (operator, member):
        client = client_as(who)
        assert client.get(LIMITS).status_code == 403
        for url, data in posts.items():
            assert client.post(url, data).status_code == 403, url
        assert f'href="{LIMITS}"' not in client.get("/").content.decode()
    assert not Limit.objects.exists()
    key.refresh_from_db()
    assert key.tokens_per_day is None
    admin = client_as(admin_user)
    page = admin.get(LIMITS).content.decode()
    assert f'href="{LIMITS}"' in page  # in the navigation
    assert f'data-key="{key.prefix}"' in page and "mia-member" in page
    assert f'href="{LIMITS}"' in admin.get("/accounts/users/").content.decode()


@pytest.mark.parametrize(
    "value, says",
    [
        ("-5", "A limit is 0 or more"),
        ("99999999999999", "At most 10,000,000,000 tokens per UTC day"),
        ("lots", "A whole number"),
    ],
)
def test_the_form_refuses_negative_huge_or_not_numbers(client_as, admin_user, member,
                                                       gateway_key, value, says):  # fmt: skip
    _, key = _key(gateway_key, member, "mine")
    answer = client_as(admin_user).post(f"{LIMITS}keys/{key.pk}/",
                                        {f"key-{key.pk}-tokens_per_day": value})  # fmt: skip
    assert answer.status_code == 400
    assert says in answer.content.decode()
    key.refresh_from_db()
    assert key.tokens_per_day is None
    assert not AuditEntry.objects.filter(action="key.limits").exists()


def test_roles_and_overrides_are_set_and_audited(client_as, admin_user, member):
    admin = client_as(admin_user)
    done = admin.post(f"{LIMITS}roles/member/", {"role-member-requests_per_minute": "30"})
    assert done.status_code == 302 and done["Location"].endswith("#role-member")
    row = Limit.objects.get(role="member")
    assert row.requests_per_minute == 30 and row.tokens_per_day is None
    created = AuditEntry.objects.get(action="limit.create")
    assert created.actor == admin_user
    assert admin.post(f"{LIMITS}roles/root/", {}).status_code == 404

    admin.post(f"{LIMITS}users/", {"add-username": member.username,
                                   "add-tokens_per_day": "5000"})  # fmt: skip
    assert Limit.objects.get(user=member).tokens_per_day == 5000
    unknown = admin.post(f"{LIMITS}users/", {"add-username": "nobody-here"})
    assert unknown.status_code == 400 and "No user is called" in unknown.content.decode()
    # Every field emptied: the override goes, the role's limits apply again.
    admin.post(f"{LIMITS}users/{member.pk}/", {f"user-{member.pk}-tokens_per_day": ""})
    assert not Limit.objects.filter(user=member).exists()
    assert AuditEntry.objects.filter(action="limit.delete", actor=admin_user).exists()


def test_a_key_limit_set_on_the_page_applies_at_the_next_request(panel, replica, client_as,
                                                                 admin_user, member,
                                                                 gateway_key):  # fmt: skip
    _, run = replica()
    clear, key = _key(gateway_key, member, "shared")
    client = openai.OpenAI(base_url=panel.v1, api_key=clear, max_retries=0)
    assert client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=2)
    answer = client_as(admin_user).post(f"{LIMITS}keys/{key.pk}/",
                                        {f"key-{key.pk}-tokens_per_day": "1"})  # fmt: skip
    assert answer.status_code == 302
    row = AuditEntry.objects.get(action="key.limits")
    assert row.actor == admin_user and row.after["tokens_per_day"] == 1
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=2)
    assert refused.value.body["code"] == "tokens_per_day"
    assert "This key's daily 1 tokens" in refused.value.body["message"]

    # The owner sees the key's own limit and what is left of it on the profile page.
    client_as(admin_user).post(f"{LIMITS}keys/{key.pk}/",
                               {f"key-{key.pk}-tokens_per_day": "10000"})  # fmt: skip
    done = client.chat.completions.create(model=run.served_name, messages=HI, max_tokens=5)
    used = done.usage.prompt_tokens + done.usage.completion_tokens
    page = client_as(member).get("/accounts/profile/").content.decode()
    assert f"Tokens today: {used} of 10,000 · <strong>{10000 - used:,} left</strong>" in page


def test_a_member_sets_lower_limits_on_a_new_key(client_as, member, fresh_gateway_keys):
    profile = client_as(member)
    answer = profile.post("/accounts/profile/keys/", {"name": "ci", "tokens_per_day": "2000",
                                                      "requests_per_minute": "-1"})  # fmt: skip
    assert answer.status_code == 400 and "A limit is 0 or more" in answer.content.decode()
    answer = profile.post("/accounts/profile/keys/", {"name": "ci", "tokens_per_day": "2000"})
    assert answer.status_code == 302
    key = GatewayKey.objects.get(user=member, name="ci")
    assert key.tokens_per_day == 2000 and key.requests_per_minute is None
    page = profile.get("/accounts/profile/").content.decode()
    assert "Tokens today: 0 of 2,000 · <strong>2,000 left</strong>" in page
