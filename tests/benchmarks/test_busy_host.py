"""A busy host is answered once, up front, in the same words everywhere: `POST /api/v1/runs`,
`POST /api/v1/jobs`, the queue form (before and after submitting) and the worker (issue #16,
point 4)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.api.tokens import token_create
from apps.benchmarks import runner
from apps.benchmarks.models import J, Job
from apps.benchmarks.services import JobRefused, job_queue
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, busy_refusal, run_start
from tests.api.conftest import Api, assert_error
from tests.runs.fitting import NAME, does_not_fit_recipe

pytestmark = pytest.mark.django_db


def api(user) -> Api:
    _token, clear = token_create(user=user, name="test")
    return Api(clear)


@pytest.fixture
def other(db):
    return Recipe.objects.create(
        name="Other", model_id="Qwen/Qwen3-32B", total_params_b=32.8, weight_format="bf16",
        num_layers=64, kv_heads=8, head_dim=128, gpu_memory_utilization=Decimal("0.60"),
        max_model_len=4096, max_num_seqs=2,
    )  # fmt: skip


def queue_form(client, suite, recipe, host):
    return client.post(
        reverse("benchmark-queue"), {"suite": suite.pk, "recipe": recipe.pk, "host": host.pk}
    )


def page_hints(client) -> dict:
    """The queue page's hint data, as bench-queue.js reads it."""
    html = client.get(reverse("benchmarks")).content.decode()
    start = html.index('<script id="queue-hints-data" type="application/json">') + len(
        '<script id="queue-hints-data" type="application/json">'
    )
    data = json.loads(html[start : html.index("</script>", start)])
    return {h["name"]: h for h in data}


def test_api_and_form_refuse_a_busy_host_up_front_with_the_same_409(
    sim_host, qwen, other, quick_suite, operator, member, client_as
):
    run = run_start(recipe=other, host=sim_host, user=operator)
    words = f"{sim_host.name} already runs “Other” (queued): stop it first"

    by_api = api(member).post("/jobs", {"recipe": qwen.slug, "host": sim_host.name,
                                        "suite": quick_suite.name})  # fmt: skip
    assert_error(by_api, 409, "host_busy")
    assert by_api.data["error"]["message"].startswith(words)
    # The runs API answers the same words.
    by_runs = api(operator).post("/runs", {"recipe": qwen.slug, "host": sim_host.name})
    assert_error(by_runs, 409, "host_busy")
    assert by_runs.data["error"]["message"] == by_api.data["error"]["message"]

    client = client_as(member)
    hint = page_hints(client)[sim_host.name]
    assert hint["state"].startswith("runs “Other” (queued)")
    assert hint["recipes"][str(qwen.pk)] == {"ok": False, "text": by_api.data["error"]["message"]}
    by_form = queue_form(client, quick_suite, qwen, sim_host)
    assert by_form.status_code == 409
    assert f"Not queued: {by_api.data['error']['message']}" in by_form.content.decode().replace(
        "&#x27;", "'"
    ).replace("&quot;", '"')
    assert not Job.objects.exists()  # no job that fails seconds later
    assert Run.objects.get(pk=run.pk).state == RunState.QUEUED


def test_a_job_for_the_recipe_already_running_reuses_that_run(
    sim_host, qwen, quick_suite, operator, member, client_as
):
    run = run_start(recipe=qwen, host=sim_host, user=operator)
    hint = page_hints(client_as(member))[sim_host.name]["recipes"][str(qwen.pk)]
    assert hint["ok"] and f"reuses run {run.pk}" in hint["text"]
    queued = api(member).post("/jobs", {"recipe": qwen.slug, "host": sim_host.name,
                                        "suite": quick_suite.name})  # fmt: skip
    assert queued.status_code == 201, queued.data
    assert busy_refusal(sim_host, qwen, reuse=True) is None
    # A second run of it is still one too many.
    assert "already runs “Qwen test”" in busy_refusal(sim_host, qwen)


def test_queued_jobs_reserve_an_idle_host_for_their_recipe(
    sim_host, qwen, other, quick_suite, operator, member, client_as
):
    job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)  # no worker: it waits
    words = f"{sim_host.name} is reserved for “Qwen test”: a benchmark job queued or running"
    with pytest.raises(RunRefused, match=words) as refused:
        run_start(recipe=other, host=sim_host, user=operator)
    assert refused.value.code == "host_busy"
    by_runs = api(operator).post("/runs", {"recipe": other.slug, "host": sim_host.name})
    assert_error(by_runs, 409, "host_busy")
    by_jobs = api(member).post("/jobs", {"recipe": other.slug, "host": sim_host.name,
                                         "suite": quick_suite.name})  # fmt: skip
    assert_error(by_jobs, 409, "host_busy")
    assert (
        by_jobs.data["error"]["message"] == by_runs.data["error"]["message"] == str(refused.value)
    )
    hints = page_hints(client_as(member))[sim_host.name]
    assert hints["state"] == "reserved for “Qwen test” by 1 job" + (
        "" if sim_host.online else " · no worker seen lately (jobs wait in its queue)"
    )
    assert not hints["recipes"][str(other.pk)]["ok"]
    assert hints["recipes"][str(qwen.pk)]["ok"]
    # The same recipe may still be queued, or started by an operator (the jobs reuse it).
    job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    assert run_start(recipe=qwen, host=sim_host, user=operator).recipe == qwen


def test_the_worker_asks_the_same_question_for_jobs_behind_another_recipes(
    sim_host, qwen, other, quick_suite, member
):
    """A job that got in (queued before the host was reserved) fails with the same words,
    and only the jobs ahead of it count: the first job is never refused by the second."""
    first = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    late = Job.objects.create(suite=quick_suite, recipe=other, host=sim_host, queued_by=member,
                              plan=first.plan)  # fmt: skip
    assert busy_refusal(sim_host, qwen, reuse=True, job=first) is None
    runner.run_job(late.pk)
    late.refresh_from_db()
    assert late.state == J.FAILED
    assert late.error.startswith(f"{sim_host.name} is reserved for “Qwen test”")
    assert not Run.objects.exists()


def test_a_job_that_would_start_a_recipe_that_does_not_fit_is_refused_422(
    sim_host, quick_suite, member, operator, client_as
):
    big = does_not_fit_recipe()
    by_api = api(member).post("/jobs", {"recipe": big.slug, "host": sim_host.name,
                                        "suite": quick_suite.name})  # fmt: skip
    assert_error(by_api, 422, "does_not_fit")
    message = by_api.data["error"]["message"]
    assert f"“{NAME}” does not fit on {sim_host.name}" in message
    assert "A benchmark job never overrides the planner" in message
    # Operators are refused too: a job never overrides (they start the run first).
    with pytest.raises(JobRefused, match="does not fit") as refused:
        job_queue(suite=quick_suite, recipe=big, host=sim_host, user=operator)
    assert refused.value.code == "does_not_fit"
    hint = page_hints(client_as(member))[sim_host.name]["recipes"][str(big.pk)]
    assert hint == {"ok": False, "text": message}
    assert queue_form(client_as(member), quick_suite, big, sim_host).status_code == 400
    assert not Job.objects.exists()
