"""A user holds at most GATEWAY_KEYS_PER_USER_MAX working gateway keys (issue 38): the
profile form and the API refuse one more in words; a revoked or expired key frees its place."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.gateway.keys import key_create, key_revoke
from apps.gateway.models import GatewayKey
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db
CAP = 3


def test_the_default_cap_is_twenty():
    from sparkpanel import settings as project

    assert project.GATEWAY_KEYS_PER_USER_MAX == 20


def test_the_profile_form_and_the_api_refuse_a_key_past_the_cap(
    settings, client_as, api_as, member, operator
):
    settings.GATEWAY_KEYS_PER_USER_MAX = CAP
    browser = client_as(member)
    for n in range(CAP):
        made = browser.post(reverse("gateway-key-create"), {"name": f"key {n}"}, follow=True)
        assert made.status_code == 200 and "spg_" in made.content.decode(), n
    refused = browser.post(reverse("gateway-key-create"), {"name": "one too many"})
    assert refused.status_code == 400
    assert f"At most {CAP} gateway keys each" in refused.content.decode()
    api = api_as(member)
    error = assert_error(api.post("/gateway/keys", {"name": "by the API"}), 409, "too_many_keys")
    assert f"At most {CAP} gateway keys each" in error["message"]
    assert GatewayKey.objects.filter(user=member).count() == CAP

    # Revoking one frees its place; an expired key holds none; other users have their own.
    key_revoke(key=GatewayKey.objects.filter(user=member).first())
    assert api.post("/gateway/keys", {"name": "in its place"}).status_code == 201
    GatewayKey.objects.filter(user=member, name="key 1").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert api.post("/gateway/keys", {"name": "for the expired one"}).status_code == 201
    assert api.post("/gateway/keys", {"name": "again too many"}).status_code == 409
    assert key_create(user=operator, name="the operator's")[1].startswith("spg_")
