"""Pinning a run (issue #22, point 7): operators pin and unpin it from its page and the API,
members cannot; a pinned run says so on its page and in the list, and a restart keeps the
pin. What a pin does to benchmark jobs is in tests/benchmarks/test_busy_host.py."""

import pytest
from django.urls import reverse

from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_pin, run_restart
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db

PINNED_WORDS = "jobs for other recipes will not replace it"


@pytest.fixture
def ready_run(sim_host, qwen):
    return Run.objects.create(recipe=qwen, host=sim_host, port=sim_host.port_min, image="x",
                              state=RunState.READY)  # fmt: skip


def page(client, url) -> str:
    return client.get(url).content.decode()


def test_operators_pin_and_unpin_a_run_from_its_page(client_as, operator, ready_run):
    client = client_as(operator)
    html = page(client, ready_run.get_absolute_url())
    assert reverse("run-pin", args=[ready_run.pk]) in html and PINNED_WORDS not in html
    assert client.get(reverse("run-pin", args=[ready_run.pk])).status_code == 405  # POST only

    response = client.post(reverse("run-pin", args=[ready_run.pk]))
    assert response.status_code == 302 and response["Location"] == ready_run.get_absolute_url()
    ready_run.refresh_from_db()
    assert ready_run.pinned and ready_run.pinned_by == operator and ready_run.pinned_at
    html = page(client, ready_run.get_absolute_url())
    assert f"{PINNED_WORDS} (pinned by {operator.username})" in html
    assert reverse("run-unpin", args=[ready_run.pk]) in html
    assert reverse("run-pin", args=[ready_run.pk]) not in html
    assert PINNED_WORDS in page(client, reverse("runs"))  # and in the run list

    client.post(reverse("run-unpin", args=[ready_run.pk]))
    ready_run.refresh_from_db()
    assert (ready_run.pinned, ready_run.pinned_by, ready_run.pinned_at) == (False, None, None)
    assert PINNED_WORDS not in page(client, reverse("runs"))


def test_members_cannot_pin_or_unpin(client_as, member, operator, ready_run, api_as):
    client = client_as(member)
    assert client.post(reverse("run-pin", args=[ready_run.pk])).status_code == 403
    assert_error(api_as(member).post(f"/runs/{ready_run.pk}/pin"), 403, "forbidden")
    ready_run.refresh_from_db()
    assert not ready_run.pinned
    html = page(client, ready_run.get_absolute_url())
    assert reverse("run-pin", args=[ready_run.pk]) not in html  # no button either
    with pytest.raises(RunRefused) as refused:  # the service checks too
        run_pin(run=ready_run, user=member)
    assert refused.value.code == "forbidden"

    run_pin(run=ready_run, user=operator)
    assert client.post(reverse("run-unpin", args=[ready_run.pk])).status_code == 403
    assert_error(api_as(member).post(f"/runs/{ready_run.pk}/unpin"), 403, "forbidden")
    ready_run.refresh_from_db()
    assert ready_run.pinned


def test_the_api_pins_and_unpins_for_operators(api_as, operator, ready_run):
    api = api_as(operator)
    assert api.get(f"/runs/{ready_run.pk}").data["pinned"] is False
    pinned = api.post(f"/runs/{ready_run.pk}/pin")
    assert pinned.status_code == 200, pinned.data
    assert (pinned.data["pinned"], pinned.data["pinned_by"]) == (True, operator.username)
    assert pinned.data["pinned_at"] and pinned.data["stop_reason"] == ""
    assert api.post(f"/runs/{ready_run.pk}/pin").status_code == 200  # again: nothing changes
    assert api.get(f"/runs/{ready_run.pk}").data["pinned"] is True
    unpinned = api.post(f"/runs/{ready_run.pk}/unpin")
    assert unpinned.status_code == 200 and unpinned.data["pinned"] is False
    assert unpinned.data["pinned_by"] is None
    assert_error(api.post("/runs/999999/pin"), 404)


def test_only_a_run_that_is_starting_or_ready_can_be_pinned(
    client_as, api_as, operator, sim_host, qwen
):
    stopped = Run.objects.create(recipe=qwen, host=sim_host, port=sim_host.port_min, image="x",
                                 state=RunState.STOPPED)  # fmt: skip
    error = assert_error(api_as(operator).post(f"/runs/{stopped.pk}/pin"), 409, "not_active")
    assert error["message"] == (
        f"Run {stopped.pk} is stopped: only a run that is starting or ready can be pinned."
    )
    response = client_as(operator).post(reverse("run-pin", args=[stopped.pk]), follow=True)
    assert f"Not pinned: {error['message']}" in response.content.decode()
    stopped.refresh_from_db()
    assert not stopped.pinned


def test_starting_a_pinned_run_again_keeps_the_pin(operator, sim_host, qwen):
    run = Run.objects.create(recipe=qwen, host=sim_host, port=sim_host.port_min, image="x",
                             state=RunState.READY)  # fmt: skip
    run_pin(run=run, user=operator)
    run.transition(RunState.STOPPING)
    run.transition(RunState.STOPPED)
    again = run_restart(run=Run.objects.get(pk=run.pk), user=operator)  # "Start again"
    assert again.pk != run.pk and again.restart_of_id == run.pk
    assert (again.pinned, again.pinned_by) == (True, operator)
