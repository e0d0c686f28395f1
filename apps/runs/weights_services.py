"""What the web pages and the API ask of a host's model cache: "Download now", cancel,
delete, rescan. Each is checked here (the same words for every caller) and done by the
host's own worker, where the cache is (apps/runs/weights.py)."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Prefetch, Run, RunState
from apps.runs.tasks import prefetch as prefetch_task
from apps.runs.tasks import weights_delete, weights_scan
from apps.runs.weights import hf_home, in_use
from sparkdomain.flags import REVISION


class CacheRefused(Exception):
    """The request cannot be done; the message says why. `code` for the API."""

    def __init__(self, message: str, code: str = "refused"):
        super().__init__(message)
        self.code = code


def _in_service(host: Host) -> None:
    """A retired Spark's queue may have no worker any more: nothing new is asked of it (the
    panel's one reason, `host_retired`); a download already under way may still be cancelled."""
    retired = host.retired_refusal()
    if retired:
        raise CacheRefused(retired, "host_retired")


def request_prefetch(*, recipe: Recipe, host: Host, user) -> Prefetch:
    """Queue the recipe's download on the host (its worker runs it after what it is doing
    now). A second request for the same model while one is queued or running returns it."""
    _in_service(host)
    why_not = host.weights_not_downloaded(recipe.model_id)
    if why_not is not None:
        raise CacheRefused(f"Nothing to download: {why_not}.", "not_downloadable")
    starting = Run.objects.filter(host=host, recipe__model_id=recipe.model_id,
                                  state=RunState.DOWNLOADING).first()  # fmt: skip
    if starting is not None:
        raise CacheRefused(
            f"Run {starting.pk} is downloading {recipe.model_id} on {host.name} already.",
            "already_downloading",
        )
    existing = Prefetch.objects.filter(host=host, repo_id=recipe.model_id,
                                       state__in=Prefetch.ACTIVE).first()  # fmt: skip
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            item = Prefetch.objects.create(
                recipe=recipe, host=host, requested_by=user, repo_id=recipe.model_id,
                revision=recipe.revision,
            )  # fmt: skip
    except IntegrityError:  # a concurrent request won the race
        return Prefetch.objects.get(host=host, repo_id=recipe.model_id, state__in=Prefetch.ACTIVE)
    transaction.on_commit(lambda: prefetch_task.apply_async(args=[item.pk], queue=host.queue))
    return item


def request_cancel(item: Prefetch) -> Prefetch:
    if not item.is_active:
        raise CacheRefused(f"The download of {item.repo_id} is {item.state} already.", "not_active")
    updated = Prefetch.objects.filter(pk=item.pk, state=Prefetch.State.QUEUED).update(
        state=Prefetch.State.CANCELLED, cancel_requested=True
    )
    if not updated:  # downloading: its worker stops at the next chunk
        Prefetch.objects.filter(pk=item.pk).update(cancel_requested=True)
    item.refresh_from_db()
    return item


def check_delete(host: Host, repo_id: str, commits: list[str] | None) -> None:
    """Refuse a deletion the cache page could not do (retired host, unknown model or
    revision, in use)."""
    _in_service(host)
    if hf_home(host) is None:
        raise CacheRefused(f"{host.name} has no Hugging Face cache set.", "no_cache")
    cached = {m["repo"]: m for m in (host.weights_cache or {}).get("models", [])}
    if repo_id not in cached:
        raise CacheRefused(f"{repo_id} is not in {host.name}'s cache (as last scanned).",
                           "not_cached")  # fmt: skip
    if commits is not None:
        known = {r["commit"] for r in cached[repo_id]["revisions"]}
        bad = [c for c in commits if not REVISION.match(c) or c not in known]
        if bad or not commits:
            raise CacheRefused(f"{repo_id} has no cached revision {', '.join(bad) or '(none)'}.",
                               "not_cached")  # fmt: skip
    reason = in_use(host, repo_id, commits)
    if reason:
        raise CacheRefused(f"{repo_id} cannot be deleted now: {reason}.", "in_use")


def request_delete(*, host: Host, repo_id: str, commits: list[str] | None) -> None:
    check_delete(host, repo_id, commits)  # and again in the worker, for a start meanwhile
    transaction.on_commit(
        lambda: weights_delete.apply_async(args=[host.pk, repo_id, commits], queue=host.queue)
    )


def request_scan(host: Host) -> None:
    _in_service(host)
    if hf_home(host) is None:
        raise CacheRefused(f"{host.name} has no Hugging Face cache set.", "no_cache")
    transaction.on_commit(lambda: weights_scan.apply_async(args=[host.pk], queue=host.queue))
