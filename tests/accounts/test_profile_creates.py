"""The profile page's creates (an API token, a gateway key, a webhook) follow post/redirect/get:
the POST answers a redirect to the profile page, whose next GET shows the new secret once
(kept in the session until then, never in the URL); a reload shows it no more and creates
nothing. A GET on a POST-only URL answers a page that says what happened, not an empty 405
(issue 43, item 5)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from apps.api.models import ApiToken, Webhook
from apps.gateway.models import GatewayKey

pytestmark = pytest.mark.django_db

CREATES = [
    # (URL name, form, anchor on the profile page, the model it creates, the secret's test id)
    ("profile", {"name": "laptop"}, "tokens", ApiToken, "new-token"),
    ("gateway-key-create", {"name": "Open WebUI"}, "gateway-keys", GatewayKey, "new-key"),
    (
        "webhook-add",
        {"url": "https://ci.example/hook", "events": ["incident"]},
        "webhooks",
        Webhook,
        "new-webhook-secret",
    ),
]


def _secret(html: str, test_id: str) -> str:
    start = html.index(f'data-testid="{test_id}">') + len(f'data-testid="{test_id}">')
    return html[start : html.index("<", start)]


@pytest.mark.parametrize("name, form, anchor, model, test_id", CREATES, ids=[c[0] for c in CREATES])
def test_a_create_redirects_and_the_secret_is_shown_once(
    client_as, member, name, form, anchor, model, test_id
):
    client = client_as(member)
    posted = client.post(reverse(name), form)
    assert posted.status_code == 302, posted.content[:300]
    # No secret in the URL: it names only the session's entry to show.
    assert re.fullmatch(rf"{reverse('profile')}\?shown=[\w-]{{12}}#{anchor}", posted["Location"])
    page = client.get(posted["Location"])
    assert page.status_code == 200 and page["Cache-Control"] == "no-store"
    secret = _secret(page.content.decode(), test_id)
    assert len(secret) >= 20
    # The reload: a GET of the same page, which neither creates nor shows the secret again.
    again = client.get(posted["Location"])
    assert again.status_code == 200
    assert secret not in again.content.decode() and f'data-testid="{test_id}"' not in (
        again.content.decode()
    )
    assert model.objects.filter(user=member).count() == 1
    assert not client.session.get("profile_shown_once")  # nothing of it left in the session


def test_two_creates_in_two_tabs_each_show_their_own_secret_once(client_as, member):
    """Two tabs of one session: a gateway key created in each before either page loads.
    Each page shows its own key (one slot in the session let the second overwrite the
    first, which was then never shown); a reload of either shows neither again."""
    client = client_as(member)
    first = client.post(reverse("gateway-key-create"), {"name": "tab one"})
    second = client.post(reverse("gateway-key-create"), {"name": "tab two"})
    # The second tab's page may well load first.
    html_two = client.get(second["Location"]).content.decode()
    html_one = client.get(first["Location"]).content.decode()
    assert "Your new key “tab one”" in html_one and "Your new key “tab two”" in html_two
    key_one, key_two = _secret(html_one, "new-key"), _secret(html_two, "new-key")
    assert key_one != key_two and key_two not in html_one and key_one not in html_two
    by_name = dict(GatewayKey.objects.filter(user=member).values_list("name", "prefix"))
    assert key_one.startswith(by_name["tab one"]) and key_two.startswith(by_name["tab two"])
    for posted in (first, second):
        assert 'data-testid="new-key"' not in client.get(posted["Location"]).content.decode()
    assert not client.session.get("profile_shown_once")


def test_a_refused_create_still_answers_the_page_with_its_errors(client_as, member):
    client = client_as(member)
    response = client.post(reverse("gateway-key-create"), {"name": ""})
    assert response.status_code == 400 and "This field is required" in response.content.decode()
    assert not GatewayKey.objects.exists()


@pytest.mark.parametrize(
    "name", ["gateway-key-create", "webhook-add", "notice-create", "email-alerts-test"]
)
def test_a_get_on_a_post_only_url_answers_a_page_that_explains(client_as, member, name):
    response = client_as(member).get(reverse(name), HTTP_ACCEPT="text/html")
    assert response.status_code == 405 and "POST" in response["Allow"]
    html = response.content.decode()
    assert "only takes a form" in html and "Nothing was changed" in html
    assert reverse("dashboard") in html
    assert not GatewayKey.objects.exists() and not Webhook.objects.exists()


def test_the_api_keeps_its_own_405(client_as, member):
    """The JSON API's 405 has a body of its own: left as it is."""
    response = client_as(member).get("/api/v1/planner/startup")
    assert response.status_code == 405
    assert b"only takes a form" not in response.content
