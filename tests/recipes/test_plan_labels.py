"""The plan box speaks the form's language: "GPU memory utilization", never the raw field
name `gpu_memory_utilization:` (issue #16)."""

import pytest
from django.urls import reverse

from apps.recipes.plan_labels import field_label
from tests.recipes.factories import recipe_data

pytestmark = pytest.mark.django_db


def test_the_live_planner_names_fields_by_their_labels(client_as, member):
    data = recipe_data(gpu_memory_utilization="0.93", max_model_len="lots")
    html = client_as(member).post(reverse("recipe-plan"), data).content.decode()
    assert "Fix these to see the plan" in html
    assert "<strong>GPU memory utilization</strong>:" in html
    assert "<strong>Max model len (context per user, tokens)</strong>:" in html
    assert "gpu_memory_utilization:" not in html and "<code>max_model_len</code>" not in html


def test_the_wizard_plan_box_uses_the_labels_too(client_as, operator):
    data = recipe_data(max_num_seqs="0", step="1")
    html = client_as(operator).post(reverse("recipe-wizard"), data).content.decode()
    assert "<strong>Max num seqs (users served at once)</strong>:" in html
    assert "max_num_seqs</code>" not in html


def test_a_field_without_a_label_still_reads_as_words():
    assert field_label("gpu_memory_utilization") == "GPU memory utilization"
    assert field_label("some_new_field") == "Some new field"
