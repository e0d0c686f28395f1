from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import EDIT_RECIPES, QUEUE_BENCHMARKS
from apps.benchmarks import guidellm_format, rate_selectors, selectors, vllm_bench
from apps.benchmarks.forms import ImportForm, JobQueueForm, SuiteForm
from apps.benchmarks.imports import job_import
from apps.benchmarks.live import job_context
from apps.benchmarks.models import Job, Suite
from apps.benchmarks.selectors import can_cancel, host_queue_entries, queue_hints
from apps.benchmarks.services import CONFLICTS as JOB_CONFLICTS
from apps.benchmarks.services import JobRefused, job_cancel, job_queue
from apps.core.ids import form_ids
from apps.core.redirects import safe_next
from apps.hosts.models import Host
from apps.recipes.models import Recipe

MAX_COMPARE = 6


def _queue_context(form: JobQueueForm) -> dict:
    # Hosts in service: a retired one has no queue and takes no job (its jobs stay below).
    queues = [(host, host_queue_entries(host)) for host in Host.objects.in_service()]
    finished = selectors.finished_jobs()
    hints = queue_hints(list(Host.objects.in_service()), list(Recipe.objects.all()))
    return {"form": form, "queues": queues, "finished": finished, "queue_hints": hints}


@require_GET
def queue_page(request: HttpRequest) -> HttpResponse:
    initial = {k: request.GET[k] for k in ("recipe", "host", "suite") if k in request.GET}
    return render(request, "benchmarks/queue.html", _queue_context(JobQueueForm(initial=initial)))


@require_POST
@permission_required(QUEUE_BENCHMARKS, raise_exception=True)
def queue_job_view(request: HttpRequest) -> HttpResponse:
    form = JobQueueForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not queued: choose a suite, a recipe and a host.")
        return render(request, "benchmarks/queue.html", _queue_context(form), status=400)
    data = form.cleaned_data
    try:
        job = job_queue(
            suite=data["suite"],
            recipe=data["recipe"],
            host=data["host"],
            user=request.user,
            note=data["note"],
        )
    except JobRefused as exc:
        # The API's words and status: 409 for the host's state (busy, reserved, memory).
        messages.error(request, f"Not queued: {exc}")
        status = 409 if exc.code in JOB_CONFLICTS else 400
        return render(request, "benchmarks/queue.html", _queue_context(form), status=status)
    messages.success(request, f"Queued job {job.pk} on {job.host}.")
    return redirect(job)


@require_GET
def job_detail(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(
        Job.objects.select_related("recipe", "host", "suite", "queued_by", "run"), pk=pk
    )
    return render(
        request,
        "benchmarks/job.html",
        {**job_context(job), "can_cancel": can_cancel(job, request.user)},
    )


@require_POST
@permission_required(QUEUE_BENCHMARKS, raise_exception=True)
def job_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    job = get_object_or_404(Job, pk=pk)
    try:
        job = job_cancel(job=job, user=request.user)
    except JobRefused as exc:
        messages.error(request, str(exc))
        return redirect(job)
    messages.success(
        request,
        "Cancelled."
        if job.state == "cancelled"
        else "Cancelling: the job stops after the requests in flight and keeps its results.",
    )
    return redirect(safe_next(request, job))


@require_GET
def job_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    job = get_object_or_404(Job.objects.select_related("recipe", "host"), pk=pk)
    name = f"sparkpanel-job-{job.pk}.{fmt}"
    if fmt == "json":
        response = JsonResponse(selectors.export_json(job), json_dumps_params={"indent": 2})
    elif fmt == "jsonl":  # every level, one line each: `vllm bench serve --append-result`
        lines = [json.dumps(vllm_bench.save_result(job, r)) for r in job.results.all()]
        response = HttpResponse("".join(line + "\n" for line in lines),
                                content_type="application/x-ndjson")  # fmt: skip
        name = f"sparkpanel-job-{job.pk}-vllm-bench.jsonl"
    else:
        response = HttpResponse(selectors.export_csv([job]), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
def level_export(request: HttpRequest, pk: int, result_pk: int) -> HttpResponse:
    """One level as the file `vllm bench serve --save-result --save-detailed` writes."""
    job = get_object_or_404(Job.objects.select_related("recipe", "host"), pk=pk)
    result = get_object_or_404(job.results, pk=result_pk)
    response = JsonResponse(vllm_bench.save_result(job, result))
    response["Content-Disposition"] = f'attachment; filename="{vllm_bench.filename(job, result)}"'
    return response


@require_GET
def guidellm_export(request: HttpRequest, pk: int) -> HttpResponse:
    """Every level as a benchmark of GuideLLM's JSON report (apps/benchmarks/guidellm_format.py)."""
    job = get_object_or_404(Job.objects.select_related("recipe", "host"), pk=pk)
    try:
        data = guidellm_format.report(job)
    except guidellm_format.ExportProblem as exc:  # no levels yet, or arrivals GuideLLM lacks
        return HttpResponse(f"Not exported: {exc}", status=409,
                            content_type="text/plain; charset=utf-8")  # fmt: skip
    response = JsonResponse(data)
    response["Content-Disposition"] = f'attachment; filename="{guidellm_format.filename(job)}"'
    return response


@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    ids = form_ids(request.GET.getlist("jobs")[:MAX_COMPARE], MAX_COMPARE)
    jobs = list(
        Job.objects.filter(pk__in=ids[:MAX_COMPARE]).select_related("recipe", "host", "suite")
    )
    jobs.sort(key=lambda j: ids.index(j.pk))
    if len(jobs) < 2:
        messages.error(request, "Choose at least two jobs to compare.")
        return redirect("benchmarks")
    if request.GET.get("format") == "csv":
        response = HttpResponse(selectors.export_csv(jobs), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="sparkpanel-compare.csv"'
        return response
    columns = [
        {
            "job": job,
            "capacity": selectors.capacity_answer(job),
            "rows": selectors.scenario_rows(job),
            "sweep": selectors.sweep_results(job),
        }
        for job in jobs
    ]
    scenario_keys = sorted(
        {(r.result.prompt_tokens, r.result.output_tokens) for c in columns for r in c["rows"]}
    )
    table = [
        {
            "shape": f"{p}/{o}",
            "cells": [
                next(
                    (
                        r
                        for r in c["rows"]
                        if (r.result.prompt_tokens, r.result.output_tokens) == (p, o)
                    ),
                    None,
                )
                for c in columns
            ],
        }
        for p, o in scenario_keys
    ]
    return render(
        request,
        "benchmarks/compare.html",
        {
            "columns": columns,
            "table": table,
            "suites": selectors.suites_of(jobs),
            "ids": ",".join(str(j.pk) for j in jobs),
            "curve_chart": selectors.curve_chart(jobs),
            "ttft_chart": selectors.ttft_chart(jobs),
            "rate_chart": rate_selectors.rate_chart(jobs),
        },
    )


@require_GET
def suite_list(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/suites.html", {"suites": Suite.objects.all()})


@permission_required(EDIT_RECIPES, raise_exception=True)
def suite_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    suite = get_object_or_404(Suite, pk=pk) if pk else Suite(created_by=request.user)
    if request.method == "POST":
        form = SuiteForm(request.POST, instance=suite)
        if form.is_valid():
            form.save()
            messages.success(request, f"Saved the suite “{suite.name}”. Queued jobs keep the "
                             "version they were queued with.")  # fmt: skip
            return redirect("benchmark-suites")
        status = 400
    else:
        form, status = SuiteForm(instance=suite), 200
    return render(request, "benchmarks/suite_form.html", {"form": form, "suite": suite},
                  status=status)  # fmt: skip


@require_http_methods(["GET", "POST"])
@permission_required(QUEUE_BENCHMARKS, raise_exception=True)
def import_view(request: HttpRequest) -> HttpResponse:
    """Results measured elsewhere, as a read-only job (apps/benchmarks/imports.py)."""
    form = ImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        job = job_import(
            levels=form.levels, name=data["file"].name or "upload", source=form.source,
            recipe=data["recipe"],
            host=data["host"], user=request.user, note=data["note"],
            slo_ttft_s=data["slo_ttft_s"], slo_tpot_s=data["slo_tpot_s"],
        )  # fmt: skip
        count = len(form.levels)
        messages.success(request, f"Imported {count} level{'s' if count != 1 else ''} as job "
                         f"{job.pk}: read-only, it compares beside the panel's own.")  # fmt: skip
        return redirect(job)
    status = 400 if request.method == "POST" else 200
    return render(request, "benchmarks/import.html", {"form": form}, status=status)
