import hashlib
import json
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Header, Query, Router, Schema, Status
from ninja.pagination import paginate

from apps.accounts.roles import QUEUE_BENCHMARKS, VIEW_PANEL
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.models import IdempotencyKey
from apps.api.pagination import Page
from apps.api.routes.common import get_or_404, get_or_422
from apps.api.schemas import CompareOut, JobDetailOut, JobOut, JobQueueIn, SuiteOut
from apps.benchmarks import selectors
from apps.benchmarks.models import ACTIVE_JOB_STATES, Job, JobState, Suite
from apps.benchmarks.selectors import queue_entry
from apps.benchmarks.services import CONFLICTS as JOB_CONFLICTS
from apps.benchmarks.services import JobRefused, job_cancel, job_queue
from apps.hosts.models import Host
from apps.recipes.models import Recipe

router = Router(tags=["benchmarks"])

IDEMPOTENCY_TTL = timedelta(hours=24)
MAX_COMPARE = 6
CSV_RESPONSE = {"responses": {200: {"description": "CSV, one row per measured level",
                "content": {"text/csv": {"schema": {"type": "string"}}}}}}  # fmt: skip


def _jobs():
    return Job.objects.select_related("recipe", "host", "suite", "queued_by").order_by("-pk")


class JobFilters(Schema):
    state: JobState | None = None
    host: str | None = None
    recipe: str | None = None
    mine: bool = False
    active: bool | None = None


@router.get("/suites", response={200: list[SuiteOut], **ERRORS}, summary="List suites")
@paginate(Page)
def list_suites(request: HttpRequest):
    """The benchmark suites a job can use (the default one first)."""
    require(request, VIEW_PANEL)
    return Suite.objects.all()


@router.get("/jobs", response={200: list[JobOut], **ERRORS}, summary="List benchmark jobs")
@paginate(Page)
def list_jobs(request: HttpRequest, filters: Query[JobFilters]):
    """Newest first."""
    require(request, VIEW_PANEL)
    jobs = _jobs()
    if filters.state:
        jobs = jobs.filter(state=filters.state)
    if filters.host:
        jobs = jobs.filter(host__name=filters.host)
    if filters.recipe:
        jobs = jobs.filter(recipe__slug=filters.recipe)
    if filters.mine:
        jobs = jobs.filter(queued_by=request.user)
    if filters.active is not None:
        in_active = {"state__in": ACTIVE_JOB_STATES}
        jobs = jobs.filter(**in_active) if filters.active else jobs.exclude(**in_active)
    return jobs


def _suite(value: str | None) -> Suite:
    if value is None or value == "":
        suite = Suite.objects.order_by("-is_default", "name").first()
        if suite is None:
            raise ApiError(422, "There is no benchmark suite yet.", fields={"suite": ["none"]})
        return suite
    suite = Suite.objects.filter(name=value).first()
    if suite is None and value.isdigit():
        suite = Suite.objects.filter(pk=int(value)).first()
    if suite is None:
        raise ApiError(422, f"No suite {value!r}.", fields={"suite": [f"No suite {value!r}."]})
    return suite


def _request_hash(payload: JobQueueIn) -> str:
    canonical = json.dumps(payload.model_dump(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replay(request: HttpRequest, key: str, request_hash: str) -> Status | None:
    entry = (
        IdempotencyKey.objects.filter(user=request.user, key=key, job__isnull=False)
        .select_related("job")
        .first()
    )
    if entry is None:
        return None
    if entry.request_hash != request_hash:
        raise ApiError(
            422,
            "This Idempotency-Key was used for a different request; use a new key.",
            code="idempotency_key_reused",
            fields={"Idempotency-Key": ["already used with a different body"]},
        )
    return Status(200, _detail(entry.job))


def _detail(job: Job) -> Job:
    """The job with where it stands in its host's queue."""
    job = _jobs().get(pk=job.pk)
    entry = queue_entry(job)
    job.position = entry.position if entry else None
    job.estimated_start = entry.estimated_start if entry else None
    job.estimate_s = entry.estimate_s if entry else None
    job.waiting = entry.waiting if entry else ""
    return job


@router.post(
    "/jobs",
    auth=needs(QUEUE_BENCHMARKS),
    response={200: JobDetailOut, 201: JobDetailOut, **ERRORS},
    summary="Queue a job",
)
def queue_job(
    request: HttpRequest,
    payload: JobQueueIn,
    idempotency_key: str | None = Header(
        None,
        alias="Idempotency-Key",
        max_length=200,
        description="Send the same key when retrying: the job is queued once and the retry "
        "gets it back (200 instead of 201). Keys last 24 hours.",
    ),
):
    """Queue a benchmark on the host's own queue (FIFO, one at a time per host). A job for
    the recipe already running there reuses that run; on a host serving another recipe (or
    with jobs queued for other recipes) it waits (`waiting` says for what) and swaps that
    run out at its turn — unless the run is pinned: 409 `pinned`, with the run and who can
    unpin it. When the job would start its recipe, `POST /runs`' rules about the request
    apply up front (422 `does_not_fit`, which a job never overrides), and on a free host
    its memory (409 `not_enough_memory`). A host an admin retired takes no jobs: 409
    `host_retired`."""
    require(request, QUEUE_BENCHMARKS)
    recipe = get_or_422(Recipe.objects.all(), "recipe", "recipe", slug=payload.recipe)
    host = get_or_422(Host.objects.all(), "host", "host", name=payload.host)
    suite = _suite(payload.suite)
    if not idempotency_key:
        return Status(201, _detail(_queue(request, payload, suite, recipe, host)))

    request_hash = _request_hash(payload)
    IdempotencyKey.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_TTL).delete()
    replay = _replay(request, idempotency_key, request_hash)
    if replay is not None:
        return replay
    try:
        with transaction.atomic():
            # The key row first: a concurrent retry with the same key waits on it, then fails
            # the unique constraint and replays this job instead of queueing its own.
            entry = IdempotencyKey.objects.create(
                user=request.user, key=idempotency_key, request_hash=request_hash
            )
            job = _queue(request, payload, suite, recipe, host)
            entry.job = job
            entry.save(update_fields=["job"])
    except IntegrityError:
        replay = _replay(request, idempotency_key, request_hash)
        if replay is None:
            raise ApiError(409, "A request with this Idempotency-Key is still being handled.",
                           code="idempotency_in_progress") from None  # fmt: skip
        return replay
    return Status(201, _detail(job))


def _queue(request, payload: JobQueueIn, suite: Suite, recipe: Recipe, host: Host) -> Job:
    try:
        return job_queue(suite=suite, recipe=recipe, host=host, user=request.user,
                         note=payload.note)  # fmt: skip
    except JobRefused as exc:
        status = 409 if exc.code in JOB_CONFLICTS else 422
        raise ApiError(status, str(exc), code=exc.code) from None


@router.get("/jobs/compare", response={200: CompareOut, **ERRORS}, summary="Compare jobs",
            openapi_extra={"responses": {200: {"content": {"text/csv": {
                "schema": {"type": "string"}}}}}})  # fmt: skip
def compare_jobs(request: HttpRequest, ids: str, format: str = "json"):
    """`ids=12,15,17` (2–6 jobs): each job's results, capacity answer and context, in the
    order given; `format=csv` for one CSV of all of them."""
    require(request, VIEW_PANEL)
    wanted: list[int] = []
    for part in ids.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 12:
            raise ApiError(422, f"Not a job id: {part!r}.", fields={"ids": ["comma-separated ids"]})
        if int(part) not in wanted:
            wanted.append(int(part))
    if not 2 <= len(wanted) <= MAX_COMPARE:
        raise ApiError(422, f"Compare 2 to {MAX_COMPARE} jobs.", fields={"ids": ["2 to 6 ids"]})
    if format not in ("json", "csv"):
        raise ApiError(422, "format is json or csv.", fields={"format": ["json or csv"]})
    found = {j.pk: j for j in _jobs().filter(pk__in=wanted)}
    missing = [pk for pk in wanted if pk not in found]
    if missing:
        raise ApiError(404, f"No job {missing[0]}.")
    jobs = [found[pk] for pk in wanted]
    if format == "csv":
        return HttpResponse(selectors.export_csv(jobs), content_type="text/csv")
    return {"jobs": [selectors.export_json(job) for job in jobs]}


@router.get("/jobs/{int:job_id}", response={200: JobDetailOut, **ERRORS}, summary="One job")
def get_job(request: HttpRequest, job_id: int):
    """State, queue position and estimated start while queued, live progress, summary."""
    require(request, VIEW_PANEL)
    return _detail(get_or_404(_jobs(), "job", pk=job_id))


@router.post(
    "/jobs/{int:job_id}/cancel",
    auth=needs(QUEUE_BENCHMARKS),
    response={200: JobDetailOut, **ERRORS},
    summary="Cancel a job",
)
def cancel_job(request: HttpRequest, job_id: int):
    """The owner or an operator. Queued: cancelled at once. Running: state `cancelling`, it
    stops after the requests in flight and keeps what it measured."""
    require(request, QUEUE_BENCHMARKS)
    job = get_or_404(_jobs(), "job", pk=job_id)
    if not job.is_active:
        raise ApiError(409, f"Job {job.pk} already finished ({job.state}).", code="not_active")
    try:
        job = job_cancel(job=job, user=request.user)
    except JobRefused as exc:
        raise ApiError(403, str(exc)) from None
    return _detail(job)


@router.get("/jobs/{int:job_id}/results", response={200: dict, **ERRORS}, summary="Results (JSON)")
def job_results(request: HttpRequest, job_id: int):
    """Everything measured, per level (vllm bench serve key names), with the capacity answer
    and the context (image, argv, host, simulated)."""
    require(request, VIEW_PANEL)
    return selectors.export_json(get_or_404(_jobs(), "job", pk=job_id))


@router.get("/jobs/{int:job_id}/results.csv", response={200: None, **ERRORS},
            summary="Results (CSV)", openapi_extra=CSV_RESPONSE)  # fmt: skip
def job_results_csv(request: HttpRequest, job_id: int):
    require(request, VIEW_PANEL)
    job = get_or_404(_jobs(), "job", pk=job_id)
    response = HttpResponse(selectors.export_csv([job]), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="sparkpanel-job-{job.pk}.csv"'
    return response
