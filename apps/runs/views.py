from __future__ import annotations

import json
import shlex

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import OPERATE_RUNS
from apps.core.redirects import safe_next
from apps.recipes.selectors import start_form_context
from apps.runs.confirm import REAL_RESTART_MINUTES, run_impact
from apps.runs.forms import RunStartForm
from apps.runs.live import log_tail, run_rows
from apps.runs.models import Run, RunState
from apps.runs.services import RunRefused, run_pin, run_restart, run_start, run_stop
from apps.telemetry.selectors import backfill


@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    context = {**run_rows(request.GET), "states": RunState.choices, **start_form_context()}
    return render(request, "runs/list.html", context)


def use_snippets(base: str, model: str) -> dict:
    """How a person calls a run's model: the team endpoint with their own gateway key."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]})
    curl = (
        f"curl {shlex.quote(base + '/chat/completions')} \\\n"
        '  -H "Authorization: Bearer $SPARKPANEL_KEY" \\\n'
        "  -H 'Content-Type: application/json' \\\n"
        f"  -d {shlex.quote(body)}"
    )
    python = (
        "from openai import OpenAI\n\n"
        f'client = OpenAI(base_url={base!r}, api_key="<your gateway key>")\n'
        "answer = client.chat.completions.create(\n"
        f"    model={model!r},\n"
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        ")\n"
        "print(answer.choices[0].message.content)"
    )
    return {"team_base": base, "use_curl": curl, "use_python": python}


@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(
        Run.objects.select_related("recipe", "host", "peer_host", "started_by",
                                   "fit_override_by", "pinned_by", "stopped_by"), pk=pk,
    )  # fmt: skip
    context = {"run": run, "log_tail": log_tail(run), "tele_id": f"tele-run-{run.pk}",
               **use_snippets(request.build_absolute_uri("/v1"), run.served_name),
               "backfill_id": f"tele-run-{run.pk}-data", "backfill": backfill(run.host, run=run),
               "ws_path": f"/ws/telemetry/run/{run.pk}/"}  # fmt: skip
    if run.is_pair:  # the worker Spark's memory beside the head's (its own agent's samples)
        peer = f"tele-run-{run.pk}-peer"
        context |= {"peer_tele_id": peer, "peer_backfill_id": f"{peer}-data",
                    "peer_backfill": backfill(run.peer_host, run=run),
                    "peer_ws_path": f"/ws/telemetry/host/{run.peer_host.name}/"}  # fmt: skip
    return render(request, "runs/detail.html", context)


@require_POST
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_start_view(request: HttpRequest) -> HttpResponse:
    form = RunStartForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a recipe and a host.")
        return redirect("runs")
    recipe, host = form.cleaned_data["recipe"], form.cleaned_data["host"]
    try:
        run = run_start(recipe=recipe, host=host, user=request.user,
                        fit_confirmation=form.cleaned_data["fit_confirmation"])  # fmt: skip
    except RunRefused as exc:
        messages.error(request, f"Not started: {exc}")
        return redirect(safe_next(request, "runs"))
    # gone from the page once the run is ready (static/js/events.js)
    messages.success(request, f"Starting “{recipe}” on {host}.", extra_tags=f"run-start-{run.pk}")
    if run.fit_override_at:
        messages.warning(
            request,
            f"Started although the planner says “{recipe}” does not fit on {host}: the override "
            "is recorded on the run.",
        )
    if not host.online:
        messages.warning(
            request,
            f"No worker has been seen for {host.name} lately: the run waits in the queue until "
            f"one consumes {host.queue} (see the Hosts page).",
        )
    return redirect(run)


def _confirm_page(request: HttpRequest, run: Run, action: str, status: int = 200) -> HttpResponse:
    """The page that says what a stop or restart interrupts, with the confirming button."""
    return render(
        request,
        "runs/confirm.html",
        {"run": run, "action": action, "impact": run_impact(run),
         "restart_minutes": REAL_RESTART_MINUTES},
        status=status,
    )  # fmt: skip


def _confirmed(request: HttpRequest) -> bool:
    return request.method == "POST" and request.POST.get("confirm") == "1"


@require_http_methods(["GET", "POST"])
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_stop_view(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks first (who is chatting or benchmarking on the run); only a POST with
    confirm=1 stops it — without it the answer is a 400 that asks again."""
    run = get_object_or_404(Run.objects.select_related("recipe", "host"), pk=pk)
    if not run.is_active or run.state == RunState.STOPPING:
        return redirect(run)  # nothing to stop (any more)
    if not _confirmed(request):
        return _confirm_page(request, run, "stop", status=200 if request.method == "GET" else 400)
    run_stop(run=run)
    messages.success(request, f"Stopping run {run.pk}.")
    return redirect(run)


@require_http_methods(["GET", "POST"])
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_restart_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Restarting an active run asks first, like Stop; starting a finished run again
    interrupts nobody and needs no confirmation."""
    run = get_object_or_404(Run.objects.select_related("recipe", "host"), pk=pk)
    if run.is_active and not _confirmed(request):
        return _confirm_page(
            request, run, "restart", status=200 if request.method == "GET" else 400
        )
    if request.method == "GET":
        return redirect(run)
    try:
        result = run_restart(run=run, user=request.user)
    except RunRefused as exc:
        messages.error(request, f"Not restarted: {exc}")
        return redirect(run)
    if result.pk != run.pk:
        messages.success(request, f"Starting “{run.recipe}” on {run.host} again.",
                         extra_tags=f"run-start-{result.pk}")  # fmt: skip
        return redirect(result)
    messages.success(
        request, f"Restarting: run {run.pk} stops, then its recipe starts again as a new run."
    )
    return redirect(run)


@require_POST
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_pin_view(request: HttpRequest, pk: int, pinned: bool) -> HttpResponse:
    """Pin or unpin a run: benchmark jobs for other recipes do not replace a pinned run."""
    run = get_object_or_404(Run.objects.select_related("recipe", "host"), pk=pk)
    try:
        run = run_pin(run=run, user=request.user, pinned=pinned)
    except RunRefused as exc:
        messages.error(request, f"Not {'pinned' if pinned else 'unpinned'}: {exc}")
        return redirect(run)
    if pinned:
        messages.success(
            request,
            f"Run {run.pk} is pinned: benchmark jobs for other recipes will not replace it.",
        )
    else:
        messages.success(
            request,
            f"Run {run.pk} is unpinned: a benchmark job for another recipe queued on "
            f"{run.host} stops it when that job's turn comes.",
        )
    return redirect(safe_next(request, run))
