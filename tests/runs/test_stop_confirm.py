"""Stop and Restart ask first on the web, saying who is chatting or benchmarking on the run;
a web POST without confirm=1 changes nothing (400). The API acts at once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.api.tokens import token_create
from apps.benchmarks.models import Job, Suite
from apps.benchmarks.selectors import suite_plan
from apps.chat.models import Conversation, Message
from apps.runs.confirm import run_impact
from apps.runs.models import Run, RunState

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready_run(sim_host, qwen, operator):
    return Run.objects.create(
        recipe=qwen, host=sim_host, port=20001, image="x", state=RunState.READY,
        started_by=operator,
    )  # fmt: skip


def chat(run, user, *, minutes_ago=0.0, status=Message.Status.COMPLETE):
    conversation = Conversation.objects.create(user=user, run=run, recipe=run.recipe)
    message = Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="hi", run=run, status=status
    )
    Message.objects.filter(pk=message.pk).update(
        created_at=timezone.now() - dt.timedelta(minutes=minutes_ago)
    )
    return message


def queue_job(run, user):
    suite = Suite.objects.create(
        name="quick", scenarios=[{"name": "s", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=0, sweep_levels=[1], requests_per_level=1,
    )  # fmt: skip
    return Job.objects.create(
        suite=suite, recipe=run.recipe, host=run.host, queued_by=user, plan=suite_plan(suite)
    )


def test_impact_names_recent_and_streaming_chatters_and_queued_benchmarks(
    ready_run, member, admin_user, operator
):
    assert not run_impact(ready_run).anyone
    chat(ready_run, member, minutes_ago=3)
    chat(ready_run, operator, minutes_ago=30)  # too long ago: not chatting any more
    chat(ready_run, admin_user, minutes_ago=45, status=Message.Status.STREAMING)  # streaming now
    job = queue_job(ready_run, member)
    impact = run_impact(ready_run)
    assert impact.chatting == [admin_user.username, member.username]
    assert impact.streaming == [admin_user.username]
    assert [b["pk"] for b in impact.benchmarks] == [job.pk]
    assert impact.benchmarks[0]["user"] == member.username


def test_stop_asks_first_and_names_who_is_affected(ready_run, member, operator, client_as):
    chat(ready_run, member, minutes_ago=1)
    job = queue_job(ready_run, member)
    client = client_as(operator)
    page = client.get(reverse("run-stop", args=[ready_run.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert member.username in html and "Chatting on this run" in html
    assert f"job {job.pk}" in html
    assert "15 minutes" in html and 'name="confirm" value="1"' in html
    ready_run.refresh_from_db()
    assert ready_run.state == RunState.READY  # asking changed nothing


def test_a_post_without_confirm_is_a_400_and_changes_nothing(ready_run, operator, client_as):
    client = client_as(operator)
    for name in ("run-stop", "run-restart"):
        response = client.post(reverse(name, args=[ready_run.pk]))
        assert response.status_code == 400, name
        assert 'name="confirm" value="1"' in response.content.decode()
        response = client.post(reverse(name, args=[ready_run.pk]), {"confirm": "yes"})
        assert response.status_code == 400, name
    ready_run.refresh_from_db()
    assert ready_run.state == RunState.READY
    assert Run.objects.count() == 1


def test_confirmed_stop_stops_and_confirmed_restart_restarts(
    ready_run, sim_host, qwen, operator, client_as
):
    client = client_as(operator)
    response = client.post(reverse("run-stop", args=[ready_run.pk]), {"confirm": "1"})
    assert response.status_code == 302
    ready_run.refresh_from_db()
    assert ready_run.state == RunState.STOPPING
    other = Run.objects.create(recipe=qwen, host=sim_host, port=20002, image="x",
                               state=RunState.STOPPED)  # fmt: skip
    # Asking again once it is stopping (or stopped) just goes back to the run.
    assert client.get(reverse("run-stop", args=[ready_run.pk])).status_code == 302
    # Starting a finished run again interrupts nobody: no confirmation needed.
    assert client.get(reverse("run-restart", args=[other.pk])).status_code == 302
    assert Run.objects.count() == 2


def test_the_restart_page_says_restart(ready_run, operator, client_as):
    html = client_as(operator).get(reverse("run-restart", args=[ready_run.pk])).content.decode()
    assert f"Yes, restart run {ready_run.pk}" in html and "loads" in html


def test_members_cannot_reach_the_confirm_page(ready_run, member, client_as):
    client = client_as(member)
    assert client.get(reverse("run-stop", args=[ready_run.pk])).status_code == 403
    assert (
        client.post(reverse("run-stop", args=[ready_run.pk]), {"confirm": "1"}).status_code == 403
    )


def test_the_api_stops_at_once_without_confirmation(ready_run, operator, client):
    _token, clear = token_create(user=operator, name="ci")
    response = client.post(
        f"/api/v1/runs/{ready_run.pk}/stop", headers={"Authorization": f"Bearer {clear}"}
    )
    assert response.status_code in (200, 202), response.content
    ready_run.refresh_from_db()
    assert ready_run.state == RunState.STOPPING
