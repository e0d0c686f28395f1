"""The on-demand catalog on the recipe page (issue #42, point 1): where the recipe stands,
and for operators the form to put it on demand, change or remove its entry, coming back to
the recipe page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.audit.models import AuditEntry
from apps.gateway.models import OnDemand

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_gateway_keys")]


def test_an_operator_puts_a_recipe_on_demand_from_its_page(client_as, operator, qwen, sim_host):
    client = client_as(operator)
    page = client.get(qwen.get_absolute_url()).content.decode()
    assert 'id="on-demand"' in page and "Not on demand" in page
    assert 'data-testid="recipe-on-demand-form"' in page
    response = client.post(reverse("gateway-on-demand-save"), {
        "recipe": qwen.pk, "hosts": [sim_host.pk], "priority": 3, "idle_minutes": 20,
        "max_replicas": 2, "next": qwen.get_absolute_url(),
    })  # fmt: skip
    assert response.status_code == 302
    assert response["Location"] == qwen.get_absolute_url() + "#on-demand"
    entry = OnDemand.objects.get(recipe=qwen)
    assert (entry.priority, entry.idle_timeout_s, entry.max_replicas) == (3, 1200, 2)
    assert AuditEntry.objects.filter(action="gateway.on_demand").exists()
    page = client.get(qwen.get_absolute_url()).content.decode()
    assert "In the team's on-demand catalog" in page and f"can load on {sim_host.name}" in page
    assert "0 of 2" in page and "Remove from the catalog" in page

    response = client.post(reverse("gateway-on-demand-delete", args=[entry.pk]),
                           {"next": qwen.get_absolute_url()})  # fmt: skip
    assert response["Location"] == qwen.get_absolute_url() + "#on-demand"
    assert not OnDemand.objects.exists()


@pytest.mark.parametrize("target", ["https://example.com/recipes/x/", "//example.com/recipes/",
                                    "/admin/", "javascript:alert(1)"])  # fmt: skip
def test_the_way_back_is_only_a_recipe_page_of_the_panel(client_as, operator, qwen, target):
    response = client_as(operator).post(reverse("gateway-on-demand-save"), {
        "recipe": qwen.pk, "priority": 0, "idle_minutes": 15, "next": target})  # fmt: skip
    assert response.status_code == 302
    assert response["Location"] == reverse("gateway-models") + "#on-demand"


def test_members_see_where_it_stands_without_the_form(client_as, member, qwen):
    OnDemand.objects.create(recipe=qwen)
    page = client_as(member).get(qwen.get_absolute_url()).content.decode()
    assert "In the team's on-demand catalog" in page
    assert 'data-testid="recipe-on-demand-form"' not in page
