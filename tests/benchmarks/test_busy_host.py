"""A busy host is answered once, up front, in the same words everywhere: `POST /api/v1/runs`,
`POST /api/v1/jobs`, the queue form (before and after submitting) and the worker (issue #16,
point 4). Since issue #22 (point 7) a benchmark job for another recipe is not refused: it
waits in the host's queue and swaps the run out at its turn (tests/benchmarks/test_swap.py
runs that), unless the run is pinned; manual run starts stay strict."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.api.tokens import token_create
from apps.benchmarks import runner
from apps.benchmarks.models import J, Job
from apps.benchmarks.selectors import queue_entry
from apps.benchmarks.services import JobRefused, job_cancel, job_queue
from apps.recipes.models import Recipe
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, busy_refusal, run_pin, run_start
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


def unescaped(response) -> str:
    return response.content.decode().replace("&#x27;", "'").replace("&quot;", '"')


def test_a_busy_host_refuses_run_starts_and_takes_jobs_that_wait_for_it(
    sim_host, qwen, other, quick_suite, operator, member, client_as
):
    run = run_start(recipe=other, host=sim_host, user=operator)
    # A manual start is still refused up front, in run admission's words.
    by_runs = api(operator).post("/runs", {"recipe": qwen.slug, "host": sim_host.name})
    assert_error(by_runs, 409, "host_busy")
    assert by_runs.data["error"]["message"].startswith(
        f"{sim_host.name} already runs “Other” (queued): stop it first"
    )
    # A job for another recipe is accepted, and says what it waits for.
    waiting = (
        f"waiting for {sim_host.name} to be free: it runs “Other” (queued); when this job's "
        "turn comes, it stops that run and starts “Qwen test”."
    )
    client = client_as(member)
    hint = page_hints(client)[sim_host.name]
    assert hint["state"].startswith("runs “Other” (queued)")
    assert hint["recipes"][str(qwen.pk)] == {"ok": True,
                                             "text": f"Queued, the job will be {waiting}"}  # fmt: skip
    by_api = api(member).post("/jobs", {"recipe": qwen.slug, "host": sim_host.name,
                                        "suite": quick_suite.name})  # fmt: skip
    assert by_api.status_code == 201, by_api.data
    assert by_api.data["waiting"] == waiting and by_api.data["position"] == 1
    by_form = queue_form(client, quick_suite, qwen, sim_host)
    assert by_form.status_code == 302
    job = Job.objects.get(pk=int(by_form["Location"].rstrip("/").rsplit("/", 1)[1]))
    assert job.state == J.QUEUED and job.recipe == qwen
    assert waiting[0].upper() + waiting[1:] in unescaped(client.get(job.get_absolute_url()))
    # The queue row of the second job: the first one, for the same recipe, is ahead of it,
    # and the host still runs the other recipe.
    assert waiting in unescaped(client.get(reverse("benchmarks")))
    assert Run.objects.get(pk=run.pk).state == RunState.QUEUED  # untouched until their turn


def test_a_pinned_run_of_another_recipe_refuses_jobs_up_front_with_the_same_409(
    sim_host, qwen, other, quick_suite, operator, member, client_as
):
    run = run_start(recipe=other, host=sim_host, user=operator)
    run_pin(run=run, user=operator)
    words = (
        f"{sim_host.name} runs “Other” (run {run.pk}), pinned by {operator.username}: benchmark "
        "jobs for other recipes do not replace a pinned run. An operator can unpin it on the "
        f"run's page (or POST /api/v1/runs/{run.pk}/unpin)"
    )
    by_api = api(member).post("/jobs", {"recipe": qwen.slug, "host": sim_host.name,
                                        "suite": quick_suite.name})  # fmt: skip
    assert_error(by_api, 409, "pinned")
    message = by_api.data["error"]["message"]
    assert message.startswith(words)
    with pytest.raises(JobRefused) as refused:  # operators too: pinning binds every job
        job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=operator)
    assert refused.value.code == "pinned" and str(refused.value) == message

    client = client_as(member)
    hint = page_hints(client)[sim_host.name]
    assert hint["state"].startswith(
        "runs “Other” (queued), pinned: jobs for other recipes will not replace it"
    )
    assert hint["recipes"][str(qwen.pk)] == {"ok": False, "text": message}
    by_form = queue_form(client, quick_suite, qwen, sim_host)
    assert by_form.status_code == 409
    assert f"Not queued: {message}" in unescaped(by_form)
    assert not Job.objects.exists()
    # A job for the pinned run's own recipe reuses it.
    assert hint["recipes"][str(other.pk)]["ok"]
    job_queue(suite=quick_suite, recipe=other, host=sim_host, user=member)
    run.refresh_from_db()
    assert run.state == RunState.QUEUED and run.pinned and not run.stop_reason


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


def test_queued_jobs_reserve_an_idle_host_against_run_starts_not_against_other_jobs(
    sim_host, qwen, other, quick_suite, operator, member, client_as
):
    first = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)  # no worker
    words = f"{sim_host.name} is reserved for “Qwen test”: a benchmark job queued or running"
    with pytest.raises(RunRefused, match=words) as refused:
        run_start(recipe=other, host=sim_host, user=operator)
    assert refused.value.code == "host_busy"
    by_runs = api(operator).post("/runs", {"recipe": other.slug, "host": sim_host.name})
    assert_error(by_runs, 409, "host_busy")
    assert by_runs.data["error"]["message"] == str(refused.value)
    # A job for another recipe queues behind it (FIFO): each swaps in its recipe in turn.
    waiting = (
        f"waiting for {sim_host.name} to be free: a benchmark job for “Qwen test” ahead of "
        "it; each job swaps in its recipe when its turn comes."
    )
    hints = page_hints(client_as(member))[sim_host.name]
    assert hints["state"] == "reserved for “Qwen test” by 1 job" + (
        "" if sim_host.online else " · no worker seen lately (jobs wait in its queue)"
    )
    assert hints["recipes"][str(other.pk)] == {"ok": True,
                                               "text": f"Queued, the job will be {waiting}"}  # fmt: skip
    assert hints["recipes"][str(qwen.pk)]["ok"]
    by_jobs = api(member).post("/jobs", {"recipe": other.slug, "host": sim_host.name,
                                         "suite": quick_suite.name})  # fmt: skip
    assert by_jobs.status_code == 201, by_jobs.data
    assert by_jobs.data["waiting"] == waiting and by_jobs.data["position"] == 2
    late = Job.objects.get(pk=by_jobs.data["id"])
    # The first job does not wait for the one behind it; and when the late job's turn comes
    # (its worker asks with the job), the jobs queued ahead of it do not refuse it.
    assert queue_entry(first).waiting == ""
    assert busy_refusal(sim_host, other, reuse=True, job=late) is None
    assert busy_refusal(sim_host, other, reuse=True) == str(refused.value)
    # Without it, the same recipe may still be queued, or started by an operator (the jobs
    # reuse it).
    job_cancel(job=late, user=member)
    job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    assert run_start(recipe=qwen, host=sim_host, user=operator).recipe == qwen


def test_a_run_pinned_after_queueing_fails_the_job_at_its_turn_and_is_left_alone(
    sim_host, qwen, other, quick_suite, operator, member
):
    """The worker asks again at the job's turn: a run pinned since the job was queued is
    not stopped; the job fails with the reason (queue it again once the run is unpinned)."""
    run = Run.objects.create(recipe=other, host=sim_host, port=sim_host.port_min, image="x",
                             state=RunState.READY, handle="process:1:1")  # fmt: skip
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    assert queue_entry(job).waiting.startswith(f"waiting for {sim_host.name} to be free")
    run_pin(run=run, user=operator)
    assert queue_entry(job).waiting.endswith(
        f"Run {run.pk} has been pinned since: unless an operator unpins it, this job fails "
        "when its turn comes."
    )
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.FAILED
    assert job.error.startswith(
        f"Not run: {sim_host.name} runs “Other” (run {run.pk}), pinned by {operator.username}"
    )
    run.refresh_from_db()
    assert (run.state, run.pinned, run.stop_reason, run.handle) == (
        RunState.READY, True, "", "process:1:1")  # fmt: skip
    assert Run.objects.count() == 1


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
