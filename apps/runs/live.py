"""A run's live elements (its progress, timings, server log and buttons) and its host's
dashboard line, and what pushes them: every state change (Run.transition, once
committed) and the start task's progress and log lines (`RunPusher`). The mechanism —
versions, `push`, the /live/ endpoint — is apps/core/live.py; docs/live-updates.md."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404
from django.template.loader import render_to_string

from apps.core import live
from apps.core.live import Element
from apps.hosts.live import host_or_404
from apps.runs import colocation
from apps.runs.models import Run, RunState
from apps.runs.weights import cache_context

# The start task pushes its progress at most this often (log lines and forced pushes at once).
PUSH_EVERY_S = 0.5
LOG_TAIL_BYTES = 20_000
LIST_LIMIT = 100  # the Runs list's rows


def run_or_404(key: str) -> Run:
    try:
        return Run.objects.select_related(
            "recipe", "host", "started_by", "pinned_by", "stopped_by"
        ).get(pk=int(key))
    except (ValueError, Run.DoesNotExist):
        raise Http404("no such run") from None


def log_tail(run: Run) -> str:
    """The end of a run's server log: a local server's log file, live; a container's log
    lives on its Spark, so the lines its worker saw."""
    path = settings.VAR_DIR / "runs" / str(run.pk) / "server.log"
    try:
        with path.open("rb") as fh:
            fh.seek(max(path.stat().st_size - LOG_TAIL_BYTES, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return run.log_tail


def run_rows(params) -> dict:
    """The Runs list's rows for its filters (?host=, ?state=: "active", a state, or anything
    else: no filter), newest first. The page and its live rows (`runs-rows`) use this, so
    a row that appears on an open list is the row a reload shows. Every role sees every
    run (the page needs view_panel, like /live/)."""
    runs = Run.objects.select_related("recipe", "host", "started_by", "pinned_by", "stopped_by")
    host, state = str(params.get("host", ""))[:100], str(params.get("state", ""))
    if "\x00" in host:  # no host has one, and some databases refuse it in a query
        runs = runs.none()
    elif host:
        runs = runs.filter(host__name=host)
    if state == "active":
        runs = runs.active()
    elif state in RunState.values:
        runs = runs.filter(state=state)
    else:
        state = ""
    # The rows' own URL carries the page's filters: each open list fetches its own rows.
    query = urlencode([(k, v) for k, v in (("host", host), ("state", state)) if v])
    return {"runs": list(runs[:LIST_LIMIT]), "limit": LIST_LIMIT, "filter_host": host,
            "filter_state": state, "rows_query": query}  # fmt: skip


def _rows_context(key: str, request) -> dict:
    return run_rows(request.GET if request is not None else {})


def _run_context(key: str, request) -> dict:
    return {"run": run_or_404(key)}


def _run_log_context(key: str, request) -> dict:
    run = run_or_404(key)
    return {"run": run, "log_tail": log_tail(run)}


def _host_line_context(key: str, request) -> dict:
    host = host_or_404(key)
    return {"host": host, "runs": colocation.runs_on(host)}


live.register(
    "run-progress",
    Element(lambda k: f"run-{k}-progress", "runs/partials/progress.html", _run_context),
)
live.register(
    "run-details", Element(lambda k: f"run-{k}-details", "runs/partials/details.html", _run_context)
)
live.register(
    "run-log", Element(lambda k: f"run-{k}-log", "runs/partials/log.html", _run_log_context)
)
live.register(
    "run-actions",
    Element(
        lambda k: f"run-{k}-actions", "runs/partials/actions.html", _run_context, personal=True
    ),
)
# The links between a run and its restarts ("Restarted as run 4 (queued)"): they change
# when a restart creates the new run and with the new run's state.
live.register(
    "run-lineage",
    Element(lambda k: f"run-{k}-lineage", "runs/partials/lineage.html", _run_context),
)
# The Runs list's rows. Marked personal though no row differs by user: each open list has
# its own filters (in its data-live-src), so a push names it and every list fetches its
# own rows — a run created while a page was offline is there after its reconnect too.
live.register(
    "runs-rows",
    Element(lambda k: "runs-rows", "runs/partials/run_rows.html", _rows_context, personal=True),
)
# A host's line on the dashboard: its active run, so it changes with the runs.
live.register("host-line", Element(lambda k: f"host-{k}-line", "core/partials/host_line.html",
                                   _host_line_context, subject="host"))  # fmt: skip


def _host_weights_context(key: str, request) -> dict:
    return cache_context(host_or_404(key))


# A host's model cache (its page) and the downloads under way there; a run's state changes
# what may be deleted, so it is about the host too.
live.register(
    "host-weights",
    Element(lambda k: f"host-{k}-weights", "runs/partials/host_weights.html",
            _host_weights_context, subject="host", personal=True),
)  # fmt: skip


def push_host_weights(host_name: str) -> int | None:
    return live.push([("host-weights", host_name)])


def push_run(run_id: int, *, lines: list[str] | None = None, actions: bool = True) -> int | None:
    """A run's progress, details and (unless `actions` is False: its buttons only change
    with its state) actions; `lines` (new log lines) are appended to its log on every open
    page whose log is older than this version. Never raises."""
    key = str(run_id)
    extra = ""
    if lines:
        extra = render_to_string("runs/partials/log_lines.html", {"run": {"pk": run_id},
                                                                    "lines": lines})  # fmt: skip
    elements = [("run-progress", key), ("run-details", key)]
    if actions:
        # A state change: its buttons, the Runs lists (a filtered list may gain or lose
        # it) and, for a restart, the old run's "Restarted as run N (state)".
        elements += [("run-actions", key), ("runs-rows", "")]
        older = Run.objects.filter(pk=run_id).values_list("restart_of_id", flat=True).first()
        if older:
            elements.append(("run-lineage", str(older)))
    return live.push(elements, extra_html=extra)


def push_run_created(host_name: str, restart_of: int | None = None) -> int | None:
    """A new run: what shows its host, every open Runs list and, for a restart, the old
    run's link to the new one and its buttons (no "Start again" beside "Restarted as run
    N"). Never raises."""
    elements = [*live.elements_about("host", host_name), ("runs-rows", "")]
    if restart_of is not None:
        elements += [("run-lineage", str(restart_of)), ("run-actions", str(restart_of))]
    return live.push(elements)


def push_host(host_name: str) -> int | None:
    """Everything that shows the host: its line on the dashboard and what other apps
    registered about it (the benchmark queue's section, apps/benchmarks/live.py)."""
    return live.push(live.elements_about("host", host_name))


class RunPusher:
    """The start task's live progress for every open page; best effort and throttled."""

    def __init__(self, run: Run):
        self.run = run
        self.last = 0.0

    def push(self, *, force: bool = False, lines: list[str] | None = None) -> None:
        now = time.monotonic()
        if not (force or lines) and now - self.last < PUSH_EVERY_S:
            return
        self.last = now
        # Rendered from the database as it is now, with a version.
        # Progress and log lines; the buttons change with the state (Run.transition).
        push_run(self.run.pk, lines=lines, actions=False)
