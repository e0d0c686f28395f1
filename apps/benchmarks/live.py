"""A benchmark job's live elements (status and progress, results, Cancel) and each host's
section of the queue page, and what pushes them: every state change (Job.move, once
committed), queueing, and the worker's progress (`push_progress`). The mechanism —
versions, `push`, the /live/ endpoint — is apps/core/live.py; docs/live-updates.md."""

from __future__ import annotations

from django.http import Http404

from apps.benchmarks import rate_selectors, selectors
from apps.benchmarks.models import FINISHED_JOB_STATES, Job
from apps.benchmarks.selectors import can_cancel, finished_jobs, host_queue_entries, queue_entry
from apps.core import live
from apps.core.live import Element
from apps.hosts.live import host_or_404


def job_or_404(key: str) -> Job:
    try:
        return Job.objects.select_related("recipe", "host", "suite", "queued_by", "run").get(
            pk=int(key)
        )
    except (ValueError, Job.DoesNotExist):
        raise Http404("no such benchmark job") from None


def job_context(job: Job) -> dict:
    """What the job page and its results element show (the Cancel button aside)."""
    rows = selectors.scenario_rows(job)
    return {
        "job": job,
        "entry": queue_entry(job),
        "scenario_rows": rows,
        "reference_note": selectors.reference_note(job, rows),
        "seed_footnotes": selectors.seed_footnotes(rows),
        "sweep": selectors.sweep_results(job),
        "capacity": selectors.capacity_answer(job),
        "rates": rate_selectors.rate_results(job),
        "rate_answer": rate_selectors.rate_answer(job),
        "rate_chart": rate_selectors.rate_chart([job]),
        "rate_chart_id": f"job-{job.pk}-rates",
        "kv_observation": selectors.kv_observation(job),
        "ceiling": selectors.decode_ceiling(job),
        "scenario_chart": selectors.scenario_chart(job),
        "curve_chart": selectors.curve_chart([job]),
        "ttft_chart": selectors.ttft_chart([job]),
        "scenario_chart_id": f"job-{job.pk}-scenarios",
        "curve_chart_id": f"job-{job.pk}-curve",
        "ttft_chart_id": f"job-{job.pk}-ttft",
    }


def _progress_context(key: str, request) -> dict:
    job = job_or_404(key)
    return {"job": job, "entry": queue_entry(job)}


def _results_context(key: str, request) -> dict:
    return job_context(job_or_404(key))


def _actions_context(key: str, request) -> dict:
    job = job_or_404(key)
    return {"job": job, "can_cancel": request is not None and can_cancel(job, request.user)}


def _queue_host_context(key: str, request) -> dict:
    host = host_or_404(key)
    return {"host": host, "entries": host_queue_entries(host)}


live.register(
    "job-progress",
    Element(
        lambda k: f"job-{k}-progress", "benchmarks/partials/job_progress.html", _progress_context
    ),
)
live.register(
    "job-results",
    Element(lambda k: f"job-{k}-results", "benchmarks/partials/job_results.html", _results_context),
)
live.register(
    "job-actions",
    Element(
        lambda k: f"job-{k}-actions",
        "benchmarks/partials/job_actions.html",
        _actions_context,
        personal=True,
    ),
)
# A host's queue changes with its jobs and with its runs (apps/runs/live.py::push_host).
live.register(
    "queue-host",
    Element(lambda k: f"queue-{k}", "benchmarks/partials/queue_host.html", _queue_host_context,
            personal=True, subject="host"),
)  # fmt: skip


# The Benchmarks page's finished jobs (a job that ends, an imported one). Marked personal
# though it is the same for everyone: a push names it and only the pages that show it
# fetch its fifty rows, rather than every open page receiving them.
live.register(
    "jobs-finished",
    Element(lambda k: "jobs-finished", "benchmarks/partials/finished_jobs.html",
            lambda k, r: {"finished": finished_jobs()}, personal=True),
)  # fmt: skip


def push_job(job_id: int, *, results: bool = False, personal: bool = True) -> int | None:
    """A benchmark job's status (and its results, after a level) and, unless `personal`
    is False (progress ticks: they change neither), its Cancel button, its host's queue
    and, once it has ended, the finished jobs, which each open page fetches for itself.
    Never raises."""
    key = str(job_id)
    elements = [("job-progress", key)]
    if results:
        elements.append(("job-results", key))
    if personal:
        elements.append(("job-actions", key))
        row = Job.objects.filter(pk=job_id).values_list("host__name", "state").first()
        host, state = row or ("", "")
        if host:
            elements.append(("queue-host", host))
        if state in FINISHED_JOB_STATES:  # it joins (or, with its summary, changes) the list
            elements.append(("jobs-finished", ""))
    return live.push(elements)


def push_progress(job: Job, *, results: bool = False, progress_only: bool = False) -> None:
    """The worker's live progress (and, after a level, the results) for every open page,
    rendered from the database as it is now, with a version. `progress_only` (the
    twice-a-second ticks) leaves out what only changes with the state or a level: the
    Cancel button and the host's queue, which every open page would fetch again."""
    push_job(job.pk, results=results, personal=not progress_only)
