""" "Does not fit" blocks a start; an operator may override it by typing the recipe's name,
and the override is recorded on the run (issue #16, point 2)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_start
from sparkdomain.planner import Verdict
from tests.api.conftest import assert_error
from tests.runs.fitting import NAME, does_not_fit_recipe

pytestmark = pytest.mark.django_db


@pytest.fixture
def big():
    recipe = does_not_fit_recipe()
    assert recipe.plan().verdict is Verdict.DOES_NOT_FIT
    return recipe


def test_the_api_refuses_with_the_planners_reason_and_accepts_the_typed_override(
    api_as, operator, sim_host, big
):
    api = api_as(operator)
    body = {"recipe": big.slug, "host": sim_host.name}
    refused = api.post("/runs", body)
    assert_error(refused, 422, "does_not_fit")
    message = refused.data["error"]["message"]
    assert f"“{NAME}” does not fit on {sim_host.name}" in message
    assert "do not fit in vLLM's pool" in message  # the planner's own reason
    assert "typing the recipe's name" in message

    wrong = api.post("/runs", {**body, "fit_confirmation": big.slug})  # the slug is not the name
    assert_error(wrong, 422, "does_not_fit")
    assert f"must be the recipe's name, “{NAME}”" in wrong.data["error"]["message"]
    assert not Run.objects.exists()

    started = api.post("/runs", {**body, "fit_confirmation": NAME})
    assert started.status_code == 201, started.data
    assert started.data["fit_override_by"] == operator.username
    assert started.data["fit_verdict"] == "does not fit"
    assert started.data["fit_override_at"]
    run = Run.objects.get(pk=started.data["id"])
    assert run.fit_override_by == operator and run.fit_override_at is not None
    detail = api.get(f"/runs/{run.pk}")
    assert detail.data["fit_override_by"] == operator.username


def test_a_member_can_never_override(api_as, member, sim_host, big):
    assert_error(api_as(member).post("/runs", {"recipe": big.slug, "host": sim_host.name,
                                               "fit_confirmation": NAME}), 403)  # fmt: skip
    with pytest.raises(RunRefused, match="Only an operator can override") as refused:
        run_start(recipe=big, host=sim_host, user=member, fit_confirmation=NAME)
    assert refused.value.code == "does_not_fit"
    assert not Run.objects.exists()


def test_a_recipe_that_fits_records_its_verdict_and_no_override(api_as, operator, sim_host, qwen):
    started = api_as(operator).post("/runs", {"recipe": qwen.slug, "host": sim_host.name})
    assert started.status_code == 201, started.data
    assert started.data["fit_verdict"] in {"fits", "tight"}
    assert started.data["fit_override_by"] is None and started.data["fit_override_at"] is None


def test_the_runs_form_refuses_then_starts_with_the_typed_name(client_as, operator, sim_host, big):
    client = client_as(operator)
    page = client.get(reverse("runs"))
    assert b'name="fit_confirmation"' in page.content
    form = {"recipe": big.pk, "host": sim_host.pk}
    refused = client.post(reverse("run-start"), form, follow=True)
    assert "Not started: The planner says" in refused.content.decode()
    assert not Run.objects.exists()
    wrong = client.post(reverse("run-start"), {**form, "fit_confirmation": "yes"}, follow=True)
    assert "must be the recipe&#x27;s name" in wrong.content.decode()
    assert not Run.objects.exists()

    started = client.post(reverse("run-start"), {**form, "fit_confirmation": f"  {NAME} "})
    run = Run.objects.get()
    assert started.status_code == 302 and started.url == run.get_absolute_url()
    assert run.fit_override_by == operator
    page = client.get(run.get_absolute_url()).content.decode()
    assert "overridden by <strong>otto-operator</strong>" in page


def test_a_restart_keeps_the_override(operator, sim_host, big):
    run = run_start(recipe=big, host=sim_host, user=operator, fit_confirmation=NAME)
    run.transition(RunState.FAILED, step="Failed")
    again = run_start(recipe=big, host=sim_host, user=operator, restart_of=run)
    assert again.fit_override_by == operator and again.restart_of == run
