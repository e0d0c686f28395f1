from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from ninja.pagination import paginate

from apps.accounts.roles import OPERATE_RUNS, VIEW_PANEL
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.pagination import Page
from apps.api.routes.common import get_or_404, get_or_422
from apps.api.schemas import RunDetailOut, RunOut, RunStartIn
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import ACTIVE_STATES, Run, RunState
from apps.runs.services import RunRefused, run_pin, run_start, run_stop

router = Router(tags=["runs"])

# Refusals about the host's current state are conflicts; the others are about the request.
CONFLICTS = {"host_busy", "no_free_port", "not_enough_memory", "memory_unknown",
             "host_retired"}  # fmt: skip


class RunFilters(Schema):
    host: str | None = None
    state: RunState | None = None
    active: bool | None = None


def _runs():
    return Run.objects.select_related(
        "recipe", "host", "started_by", "fit_override_by", "pinned_by"
    ).order_by("-created_at")


@router.get("/runs", response={200: list[RunOut], **ERRORS}, summary="List runs")
@paginate(Page)
def list_runs(request: HttpRequest, filters: Query[RunFilters]):
    """Newest first; filter by host, state, or active (true = queued … stopping)."""
    require(request, VIEW_PANEL)
    runs = _runs()
    if filters.host:
        runs = runs.filter(host__name=filters.host)
    if filters.state:
        runs = runs.filter(state=filters.state)
    if filters.active is not None:
        in_active = {"state__in": ACTIVE_STATES}
        runs = runs.filter(**in_active) if filters.active else runs.exclude(**in_active)
    return runs


@router.get("/runs/{int:run_id}", response={200: RunDetailOut, **ERRORS}, summary="One run")
def get_run(request: HttpRequest, run_id: int):
    """State (the phase), step, progress %, elapsed and remaining seconds, failure with log."""
    require(request, VIEW_PANEL)
    return get_or_404(_runs(), "run", pk=run_id)


@router.post(
    "/runs", auth=needs(OPERATE_RUNS), response={201: RunOut, **ERRORS}, summary="Start a run"
)
def start_run(request: HttpRequest, payload: RunStartIn):
    """Operators. Admission control as on the Runs page: 409 when the host is busy (an
    active run, or benchmark jobs queued for another recipe) or lacks the memory, and
    `host_retired` when an admin retired the host (it takes no new runs); 422 when
    the image is not allowed there, or `does_not_fit` when the planner says the recipe does
    not fit on the host — send the recipe's name as `fit_confirmation` to start it anyway
    (recorded on the run as `fit_override_by`)."""
    require(request, OPERATE_RUNS)
    recipe = get_or_422(Recipe.objects.all(), "recipe", "recipe", slug=payload.recipe)
    host = get_or_422(Host.objects.all(), "host", "host", name=payload.host)
    try:
        run = run_start(recipe=recipe, host=host, user=request.user,
                        fit_confirmation=payload.fit_confirmation)  # fmt: skip
    except RunRefused as exc:
        status = 409 if exc.code in CONFLICTS else 422
        raise ApiError(status, str(exc), code=exc.code) from None
    return Status(201, get_or_404(_runs(), "run", pk=run.pk))


@router.post(
    "/runs/{int:run_id}/stop",
    auth=needs(OPERATE_RUNS),
    response={202: RunOut, **ERRORS},
    summary="Stop a run",
)
def stop_run(request: HttpRequest, run_id: int):
    """Operators. 202: the host's worker stops it (poll the run until it is stopped)."""
    require(request, OPERATE_RUNS)
    run = get_or_404(_runs(), "run", pk=run_id)
    if not run.is_active:
        raise ApiError(409, f"Run {run.pk} is already {run.get_state_display().lower()}.",
                       code="not_active")  # fmt: skip
    run = run_stop(run=run)
    return Status(202, run)


def _pin(request: HttpRequest, run_id: int, pinned: bool):
    require(request, OPERATE_RUNS)
    run = get_or_404(_runs(), "run", pk=run_id)
    try:
        run_pin(run=run, user=request.user, pinned=pinned)
    except RunRefused as exc:
        status = 409 if exc.code == "not_active" else 403  # the run is over / not an operator
        raise ApiError(status, str(exc), code=exc.code) from None
    return get_or_404(_runs(), "run", pk=run_id)


@router.post(
    "/runs/{int:run_id}/pin",
    auth=needs(OPERATE_RUNS),
    response={200: RunOut, **ERRORS},
    summary="Pin a run",
)
def pin_run(request: HttpRequest, run_id: int):
    """Operators. Benchmark jobs for other recipes do not replace a pinned run: queueing
    one on its host is refused (409 `pinned`), and one queued before the pin fails at its
    turn. Operators still stop or restart it (a restart stays pinned). 409 `not_active`
    unless the run is starting or ready; pinning a pinned run changes nothing."""
    return _pin(request, run_id, True)


@router.post(
    "/runs/{int:run_id}/unpin",
    auth=needs(OPERATE_RUNS),
    response={200: RunOut, **ERRORS},
    summary="Unpin a run",
)
def unpin_run(request: HttpRequest, run_id: int):
    """Operators. Benchmark jobs for other recipes may swap the run out again at their turn."""
    return _pin(request, run_id, False)
