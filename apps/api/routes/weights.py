"""A host's model cache and "Download now" (docs/weights.md, docs/api.md): the same
checks as the pages (apps/runs/weights_services.py); the host's worker does the work, so
changes answer 202 and the cache listing shows the outcome."""

from django.http import HttpRequest
from ninja import Query, Router, Schema

from apps.accounts.roles import OPERATE_RUNS, VIEW_PANEL
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.routes.common import get_or_404, get_or_422
from apps.api.schemas import DownloadIn, HostCacheOut, PrefetchOut
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Prefetch
from apps.runs.weights import cache_context
from apps.runs.weights_services import (
    CacheRefused,
    request_cancel,
    request_delete,
    request_prefetch,
    request_scan,
)

router = Router(tags=["weights"])
CONFLICTS = {"in_use", "already_downloading", "not_active", "host_retired"}
NOT_FOUND = {"not_cached"}


def _refused(exc: CacheRefused) -> ApiError:
    status = 409 if exc.code in CONFLICTS else 404 if exc.code in NOT_FOUND else 422
    return ApiError(status, str(exc), code=exc.code)


def prefetch_out(item: Prefetch) -> dict:
    return {
        "id": item.pk, "host": item.host.name, "recipe": item.recipe.slug, "repo": item.repo_id,
        "revision": item.revision, "commit": item.commit, "state": item.state,
        "progress": item.progress, "error": item.error, "advice": item.advice,
        "requested_by": item.requested_by.get_username() if item.requested_by else None,
        "created_at": item.created_at, "finished_at": item.finished_at,
    }  # fmt: skip


@router.get("/hosts/{name}/models", response={200: HostCacheOut, **ERRORS},
            summary="A host's model cache")  # fmt: skip
def host_cache(request: HttpRequest, name: str):
    """The host's last cache scan: models, revisions, sizes, the recipes using each, what
    stops a deletion; the disk's free space; the newest downloads."""
    require(request, VIEW_PANEL)
    host = get_or_404(Host.objects.all(), "host", name=name)
    c = cache_context(host)
    models = [
        {"repo": m["repo"], "size": m["size"], "partial": m["partial"],
         "last_accessed": m["last_accessed"], "revisions": m["revisions"],
         "recipes": [r.slug for r in m["recipes"]], "in_use": m["in_use"]}
        for m in c["models"]
    ]  # fmt: skip
    return {"host": host.name, "path": host.hf_cache_path, "free_bytes": c["free_bytes"],
            "total_bytes": c["total_bytes"], "scanned_at": c["scanned_at"],
            "error": c["scan_error"], "models": models,
            "downloads": [prefetch_out(p) for p in c["prefetches"]]}  # fmt: skip


@router.post("/hosts/{name}/models/scan", auth=needs(OPERATE_RUNS),
             response={202: dict, **ERRORS}, summary="Scan a host's cache again")  # fmt: skip
def scan_cache(request: HttpRequest, name: str):
    host = get_or_404(Host.objects.all(), "host", name=name)
    try:
        request_scan(host)
    except CacheRefused as exc:
        raise _refused(exc) from None
    return 202, {"queued": True}


class DeleteQuery(Schema):
    commit: str | None = None


@router.delete(
    "/hosts/{name}/models/{org}/{model}", auth=needs(OPERATE_RUNS),
    response={202: dict, **ERRORS}, summary="Delete a cached model or revision",
)  # fmt: skip
def delete_cached(request: HttpRequest, name: str, org: str, model: str,
                  query: Query[DeleteQuery]):  # fmt: skip
    """The whole model (with unfinished downloads), or one revision (`?commit=`). Refused
    (409 in_use) while an active run serves it or a download of it runs."""
    host = get_or_404(Host.objects.all(), "host", name=name)
    commits = [query.commit[:64]] if query.commit else None
    try:
        request_delete(host=host, repo_id=f"{org}/{model}"[:200], commits=commits)
    except CacheRefused as exc:
        raise _refused(exc) from None
    return 202, {"queued": True}


@router.post(
    "/recipes/{slug}/download", auth=needs(OPERATE_RUNS),
    response={202: PrefetchOut, **ERRORS}, summary="Download a recipe's weights now",
)  # fmt: skip
def download_now(request: HttpRequest, slug: str, payload: DownloadIn):
    """Prefetch without starting; a second request while one runs returns it."""
    recipe = get_or_404(Recipe.objects.all(), "recipe", slug=slug)
    host = get_or_422(Host.objects.all(), "host", "host", name=payload.host)
    try:
        item = request_prefetch(recipe=recipe, host=host, user=request.user)
    except CacheRefused as exc:
        raise _refused(exc) from None
    return 202, prefetch_out(item)


@router.get("/downloads/{int:download_id}", response={200: PrefetchOut, **ERRORS},
            summary="One download")  # fmt: skip
def get_download(request: HttpRequest, download_id: int):
    require(request, VIEW_PANEL)
    qs = Prefetch.objects.select_related("host", "recipe", "requested_by")
    return prefetch_out(get_or_404(qs, "download", pk=download_id))


@router.post("/downloads/{int:download_id}/cancel", auth=needs(OPERATE_RUNS),
             response={200: PrefetchOut, **ERRORS}, summary="Cancel a download")  # fmt: skip
def cancel_download(request: HttpRequest, download_id: int):
    qs = Prefetch.objects.select_related("host", "recipe", "requested_by")
    item = get_or_404(qs, "download", pk=download_id)
    try:
        item = request_cancel(item)
    except CacheRefused as exc:
        raise _refused(exc) from None
    return prefetch_out(item)
