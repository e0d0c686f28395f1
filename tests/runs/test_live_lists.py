"""The live lists and links of issue 43, below the browser: the Runs list's rows and the
finished jobs are live elements (/live/runs-rows/ with the page's filters, /live/jobs-
finished/), named in a push when a run is created or changes state and when a job ends; a
restart pushes the old run's "Restarted as run N" and names its buttons, which no longer
offer "Start again". Real Redis, real Channels layer, real database."""

from __future__ import annotations

import pytest

from apps.benchmarks.lifecycle import request_cancel
from apps.benchmarks.models import J, Job, Suite
from apps.benchmarks.selectors import suite_plan
from apps.runs import runner, tasks
from apps.runs.models import Run, RunState
from apps.runs.services import run_restart, run_start
from tests.livepush import pushes as _pushes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


@pytest.fixture
def no_start_task(monkeypatch):
    """No worker consumes the test host's queue: the start task is not sent (the run stays
    queued, which is all these tests look at)."""
    monkeypatch.setattr(tasks.start_run, "apply_async", lambda *a, **kw: None)


def _run(host, recipe, state=RunState.STOPPED, port=20600) -> Run:
    return Run.objects.create(recipe=recipe, host=host, port=port, image=recipe.image,
                              argv=[], state=state, step=state)  # fmt: skip


def _named(dom_id: str):
    return lambda messages: any(dom_id in m.get("changed", []) for m in messages)


# --- the Runs list ----------------------------------------------------------------------------


def test_the_runs_rows_follow_the_pages_filters_for_every_role(
    client_as, member, operator, outsider, sim_host, qwen
):
    stopped = _run(sim_host, qwen, RunState.STOPPED, 20600)
    failed = _run(sim_host, qwen, RunState.FAILED, 20601)
    for user in (member, operator):
        html = client_as(user).get("/live/runs-rows/").content.decode()
        assert html.startswith('<tbody id="runs-rows" data-live-src="/live/runs-rows/">')
        assert f'id="run-{stopped.pk}-row"' in html and f'id="run-{failed.pk}-row"' in html
    c = client_as(member)
    response = c.get("/live/runs-rows/", {"host": sim_host.name, "state": "failed"})
    html = response.content.decode()
    assert response.status_code == 200 and int(response["X-Live-Seq"]) > 0
    assert f'id="run-{failed.pk}-row"' in html and f'id="run-{stopped.pk}-row"' not in html
    # The rows fetch themselves again with the same filters, as the page rendered them.
    src = f'data-live-src="/live/runs-rows/?host={sim_host.name}&amp;state=failed"'
    assert src in html
    assert src in c.get("/runs/", {"host": sim_host.name, "state": "failed"}).content.decode()
    # What anyone can type is answered, escaped, never a 500: an unknown state is no filter.
    for params in ({"host": "<script>alert(1)</script>"}, {"host": "a\x00b"},
                   {"state": "nonsense"}, {"host": "x" * 5000}):  # fmt: skip
        response = c.get("/live/runs-rows/", params)
        assert response.status_code == 200, params
        assert "<script>alert" not in response.content.decode()
    assert (
        f"run-{failed.pk}-row" in c.get("/live/runs-rows/", {"state": "nonsense"}).content.decode()
    )
    assert client_as(outsider).get("/live/runs-rows/").status_code == 403


def test_a_new_run_and_each_state_change_name_the_runs_lists(member, sim_host, qwen,
                                                             no_start_task):  # fmt: skip
    created: list[Run] = []
    messages = _pushes(
        member,
        lambda: created.append(run_start(recipe=qwen, host=sim_host, user=member)),
        until=_named("runs-rows"),
    )
    assert created and created[0].state == RunState.QUEUED
    # Named, never rendered into the push: each list fetches its own rows (its filters).
    assert all('id="runs-rows"' not in m["html"] for m in messages)
    run = created[0]
    messages = _pushes(member, lambda: run.mark_failed("the test says no"),
                       until=_named("runs-rows"))  # fmt: skip
    assert any(f'id="run-{run.pk}-progress"' in m["html"] for m in messages)


# --- a restart ---------------------------------------------------------------------------------


def test_starting_a_finished_run_again_links_it_live_and_drops_its_start_again(
    client_as, member, operator, sim_host, qwen, no_start_task
):
    old = _run(sim_host, qwen, RunState.STOPPED)
    c = client_as(operator)
    assert ">Start again<" in c.get(f"/live/run-actions/{old.pk}/").content.decode()
    messages = _pushes(member, lambda: run_restart(run=old, user=operator),
                       until=lambda ms: any(f'id="run-{old.pk}-lineage"' in m["html"]
                                            for m in ms))  # fmt: skip
    new = Run.objects.get(restart_of=old)
    push = next(m for m in messages if f'id="run-{old.pk}-lineage"' in m["html"])
    assert f'Restarted as <a href="/runs/{new.pk}/">run {new.pk}</a> (queued)' in push["html"]
    assert f"run-{old.pk}-actions" in push["changed"] and "runs-rows" in push["changed"]
    # The old run's buttons, fetched (the push named them) or on a reload: no Start again.
    assert ">Start again<" not in c.get(f"/live/run-actions/{old.pk}/").content.decode()
    page = c.get(f"/runs/{old.pk}/").content.decode()
    assert ">Start again<" not in page and f"run {new.pk}</a> (queued)" in page
    # The new run's state reaches the old run's link.
    messages = _pushes(member, lambda: Run.objects.get(pk=new.pk).mark_failed("no"),
                       until=lambda ms: any(f'id="run-{old.pk}-lineage"' in m["html"]
                                            for m in ms))  # fmt: skip
    assert any(f"run {new.pk}</a> (failed)" in m["html"] for m in messages)
    # The newest run is the one started again.
    assert ">Start again<" in c.get(f"/live/run-actions/{new.pk}/").content.decode()


def test_the_workers_restart_of_an_active_run_links_the_old_runs_pages(
    member, operator, sim_host, qwen, no_start_task
):
    """Restart on a ready run: the host's worker stops it and starts the recipe as a new
    run (apps/runs/runner.py::restart, run here as its task would)."""
    old = _run(sim_host, qwen, RunState.READY)
    messages = _pushes(member, lambda: runner.restart(old.pk, operator.pk),
                       until=lambda ms: any(f'id="run-{old.pk}-lineage"' in m["html"]
                                            and "Restarted as" in m["html"] for m in ms))  # fmt: skip
    new = Run.objects.get(restart_of=old)
    assert Run.objects.get(pk=old.pk).state == RunState.STOPPED
    last = next(m for m in messages if f"run {new.pk}</a>" in m["html"])
    assert f"run-{old.pk}-actions" in last["changed"]


# --- the finished jobs --------------------------------------------------------------------------


def test_a_job_that_ends_names_the_finished_jobs_which_list_it(client_as, member, sim_host, qwen):
    suite = Suite.objects.create(
        name="live list", scenarios=[{"name": "s", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=200, sweep_output_tokens=128,
        sweep_levels=[1], requests_per_level=2, slo_ttft_s=2.0, slo_tpot_s=0.1,
    )  # fmt: skip
    job = Job.objects.create(suite=suite, recipe=qwen, host=sim_host, queued_by=member,
                             plan=suite_plan(suite))  # fmt: skip
    c = client_as(member)
    assert f"job-{job.pk}-finished" not in c.get("/live/jobs-finished/").content.decode()
    _pushes(member, lambda: request_cancel(job, by=member), until=_named("jobs-finished"))
    assert Job.objects.get(pk=job.pk).state == J.CANCELLED
    html = c.get("/live/jobs-finished/").content.decode()
    assert html.startswith('<div id="jobs-finished" data-live-src="/live/jobs-finished/">')
    assert f'id="job-{job.pk}-finished"' in html and "Cancelled" in html
    assert f'id="job-{job.pk}-finished"' in c.get("/benchmarks/").content.decode()
