"""Model weights on a host, the panel's side: the download a run does before its start
(and "Download now" does without one), the disk rule, the cache inventory and deletion.

The hub and the cache layout are `hf_adapter`'s; this module decides which cache (the
host's "Hugging Face cache" setting), which endpoint and token (the worker's settings,
never a recipe's), how long a download may take and how often it is retried, and what may
be deleted (never what an active run or a download uses). It runs in the host's own
worker, where the cache is. docs/weights.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from apps.hosts.models import Host
from apps.recipes.models import ModelFacts, Recipe
from apps.runs.models import Prefetch, Run
from hf_adapter import cache, facts, inventory, transfer
from hf_adapter.errors import HubError
from hf_adapter.plan import DownloadPlan, plan_download
from sparkdomain.weights import disk_refusal, gb

log = logging.getLogger(__name__)
DEFAULT_REVISION = "main"
# At most this many files are kept in a progress report (a 200-shard model would make every
# push carry 200 rows): the active ones first, then the largest still missing.
PROGRESS_FILES = 12


class WeightsFailed(Exception):
    """A download that cannot go on, in words a user can act on."""

    def __init__(self, kind: str, reason: str, advice: str = "") -> None:
        super().__init__(reason)
        self.kind, self.reason, self.advice = kind, reason, advice


@dataclass(frozen=True)
class Fetched:
    repo_id: str
    revision: str  # as asked
    commit: str  # what it resolved to: what the server is pinned to
    total_bytes: int  # the files vLLM needs
    fetched_bytes: int  # by this download (0: all of it was cached)
    files: int
    skipped_bytes: int  # in the repository, but not needed (other formats, folders)
    attempts: int

    def as_facts(self) -> dict:
        return {
            "repo": self.repo_id, "revision": self.revision, "commit": self.commit,
            "total_bytes": self.total_bytes, "fetched_bytes": self.fetched_bytes,
            "files": self.files, "skipped_bytes": self.skipped_bytes, "by": "panel",
        }  # fmt: skip


def hf_home(host: Host) -> Path | None:
    """The host's Hugging Face home (holding `hub/`), or None when it has none set: then
    nothing is downloaded before a start and vLLM fetches the weights itself."""
    return Path(host.hf_cache_path) if host.hf_cache_path else None


def cache_problem(host: Host, *, raise_it: bool = False) -> str | None:
    """Why the host's cache folder cannot take a download here (where its worker runs):
    missing or not writable — the worker must see the Spark's folder at the same path."""
    home = hf_home(host)
    if home is None or (home.is_dir() and os.access(home, os.W_OK | os.X_OK)):
        return None
    what = "does not exist" if not home.is_dir() else "is not writable"
    reason = f"The Hugging Face cache {home} set for {host.name} {what} where its worker runs."
    if raise_it:
        raise WeightsFailed(
            "no_cache_dir", reason,
            "Create it on the Spark, writable by the worker's user; with docker compose, set "
            "HF_CACHE_DIR in that Spark's .env to this path (the worker mounts it at the same "
            "place) — or correct the host's Hugging Face cache in admin.",
        )  # fmt: skip
    return reason


def _plan(host: Host, repo_id: str, revision: str) -> DownloadPlan:
    return plan_download(
        repo_id, revision or DEFAULT_REVISION, hub_cache=cache.hub_cache(hf_home(host)),
        endpoint=settings.HF_ENDPOINT, token=settings.HF_TOKEN or None,
    )  # fmt: skip


def _report(plan: DownloadPlan, progress: dict, attempt: int, note: str = "") -> dict:
    """A progress report small enough to push: totals, rate, ETA and the files that
    matter now."""
    files = progress.get("files", {})
    active = [p for p in progress.get("active", []) if p in files]
    rest = sorted((p for p in files if p not in active and files[p][0] < files[p][1]),
                  key=lambda p: -files[p][1])  # fmt: skip
    shown = (active + rest)[:PROGRESS_FILES]
    return {
        "repo": plan.repo_id, "commit": plan.commit, "total_bytes": progress["total_bytes"],
        "done_bytes": progress["done_bytes"], "fetched_bytes": progress.get("fetched_bytes", 0),
        "rate_bps": progress.get("rate_bps"), "eta_s": progress.get("eta_s"),
        "files": [{"path": p, "done": files[p][0], "size": files[p][1], "active": p in active}
                  for p in shown],
        "files_left": sum(1 for d, s in files.values() if d < s),
        "attempt": attempt, "note": note, "finished": bool(progress.get("finished")),
    }  # fmt: skip


def fetch(
    host: Host,
    repo_id: str,
    revision: str,
    *,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Fetched:
    """Download what the host's cache lacks of `repo_id` at `revision`, with progress.

    Disk admission first (the missing bytes against the cache volume's free space); then
    the transfer, retried after a network or hub failure (it resumes where it ended) until
    WEIGHTS_DOWNLOAD_RETRIES or the WEIGHTS_DOWNLOAD_TIMEOUT_MINUTES deadline. Raises
    `transfer.DownloadStopped` when `should_stop()` says so, `WeightsFailed` otherwise."""
    deadline = time.monotonic() + settings.WEIGHTS_DOWNLOAD_TIMEOUT_S
    timed_out = False

    def stop() -> bool:
        nonlocal timed_out
        timed_out = timed_out or time.monotonic() > deadline
        return timed_out or (should_stop is not None and should_stop())

    last: dict = {"repo": repo_id}

    def say(report: dict) -> None:
        last.clear()
        last.update(report)
        if on_progress is not None:
            on_progress(report)

    cache_problem(host, raise_it=True)
    attempt, missing_at_start = 1, None
    while True:
        try:
            plan = _plan(host, repo_id, revision)
            missing_at_start = plan.missing_bytes if missing_at_start is None else missing_at_start
            refusal = disk_refusal(plan.missing_bytes, plan.free_bytes(), host.name,
                                   settings.WEIGHTS_DISK_RESERVE_BYTES)  # fmt: skip
            if refusal:
                raise WeightsFailed("disk", f"{repo_id} {refusal}.", _disk_advice(host))
            files = {f.entry.path: [f.have, f.entry.size] for f in plan.files}
            start = {"total_bytes": plan.total_bytes, "fetched_bytes": 0, "files": files,
                     "done_bytes": plan.total_bytes - plan.missing_bytes}  # fmt: skip
            say(_report(plan, start, attempt))
            if not plan.complete:
                transfer.download(
                    plan, token=settings.HF_TOKEN or None, should_stop=stop,
                    on_progress=_reporter(say, plan, attempt),
                    workers=settings.WEIGHTS_DOWNLOAD_WORKERS,
                )  # fmt: skip
            else:  # every blob is there; this commit's snapshot and ref may not be yet
                transfer.link_snapshot(plan)
            _record_facts(host, repo_id, plan.commit)
            return Fetched(
                repo_id=repo_id, revision=revision or DEFAULT_REVISION, commit=plan.commit,
                total_bytes=plan.total_bytes, fetched_bytes=missing_at_start,
                files=len(plan.files), skipped_bytes=plan.selection.skipped_bytes,
                attempts=attempt,
            )  # fmt: skip
        except transfer.DownloadStopped:
            if timed_out:
                raise _timeout(repo_id) from None
            raise
        except HubError as exc:
            pause = min(60.0, settings.WEIGHTS_RETRY_PAUSE_S * 3 ** (attempt - 1))
            if (not exc.retryable or attempt > settings.WEIGHTS_DOWNLOAD_RETRIES
                    or time.monotonic() + pause > deadline):  # fmt: skip
                raise WeightsFailed(exc.kind, exc.message, exc.advice) from None
            log.warning("download of %s, try %d: %s", repo_id, attempt, exc.message)
            tries = settings.WEIGHTS_DOWNLOAD_RETRIES + 1
            note = f"{exc.message} — trying again in {pause:.0f} s (try {attempt + 1} of {tries})"
            say({**last, "attempt": attempt, "note": note, "rate_bps": None, "eta_s": None})
        # The pause, outside the handlers: a stop or the deadline during it ends as above.
        try:
            _sleep_unless_stopped(pause, stop, sleep)
        except transfer.DownloadStopped:
            if timed_out:
                raise _timeout(repo_id) from None
            raise
        attempt += 1


def _record_facts(host: Host, repo_id: str, commit: str) -> None:
    """What the start-up prediction needs (config.json, the checkpoint's size), kept for the
    recipe page; bookkeeping that never fails the download."""
    try:
        found = facts.from_cache(repo_id, commit, cache.hub_cache(hf_home(host)))
        if found is not None:
            ModelFacts.record(found)
    except (HubError, OSError, DatabaseError) as exc:
        log.warning("facts of %s@%s not kept: %s", repo_id, commit[:12], exc)


def _timeout(repo_id: str) -> WeightsFailed:
    return WeightsFailed(
        "timeout",
        f"Downloading {repo_id} took longer than "
        f"{settings.WEIGHTS_DOWNLOAD_TIMEOUT_S / 60:g} minutes.",
        "What was fetched is kept: start again to resume, or raise "
        "WEIGHTS_DOWNLOAD_TIMEOUT_MINUTES for a slow line.",
    )


def _reporter(say, plan: DownloadPlan, attempt: int):
    return lambda progress: say(_report(plan, progress, attempt))


def _sleep_unless_stopped(seconds: float, stop: Callable[[], bool], sleep) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if stop():
            raise transfer.DownloadStopped()
        sleep(min(0.25, max(0.0, end - time.monotonic())))


def _disk_advice(host: Host) -> str:
    return (
        f"Delete cached models on {host.name}'s page (Hosts → {host.name} → Model cache), or "
        "free space on the cache's disk, then start again."
    )


def pinned_argv(argv: list[str], commit: str) -> list[str]:
    """The `vllm serve` vector served at exactly `commit` (its --revision set to it)."""
    if "--revision" in argv[3:]:
        i = argv.index("--revision", 3)
        return [*argv[: i + 1], commit, *argv[i + 2 :]]
    return [*argv[:3], "--revision", commit, *argv[3:]]


def progress_line(report: dict) -> tuple[str, float]:
    """(step, percent) for a run's progress bar."""
    total, done = report.get("total_bytes") or 0, report.get("done_bytes") or 0
    if not total:
        what = report.get("repo", "the weights")
        return f"Downloading {what}: {report.get('note') or 'planning'}", 0.0
    line = f"Downloading {report['repo']}: {gb(done)} of {gb(total)}"
    if report.get("rate_bps"):
        line += f" at {report['rate_bps'] / 1e6:.1f} MB/s"
    if report.get("note"):
        line += f" — {report['note']}"
    return line, round(100 * done / total, 1)


# --- the cache inventory ------------------------------------------------------------------


def scan(host: Host) -> dict:
    """Scan the host's cache (in its worker) and keep the answer on the host."""
    home = hf_home(host)
    if home is None:
        Host.objects.filter(pk=host.pk).update(
            weights_cache={}, weights_cache_at=timezone.now(),
            weights_cache_error="no Hugging Face cache is set for this host",
        )  # fmt: skip
        return {}
    problem = cache_problem(host)
    if problem:
        Host.objects.filter(pk=host.pk).update(weights_cache_at=timezone.now(),
                                               weights_cache_error=problem[:300])  # fmt: skip
        return {}
    try:
        found = inventory.scan(cache.hub_cache(home))
    except OSError as exc:
        Host.objects.filter(pk=host.pk).update(weights_cache_at=timezone.now(),
                                               weights_cache_error=str(exc)[:300])  # fmt: skip
        return {}
    data = {
        "path": str(home),
        "free_bytes": found.free_bytes,
        "total_bytes": found.total_bytes,
        "warnings": list(found.warnings)[:20],
        "models": [_model_row(m) for m in found.models],
    }
    if (host.weights_cache or {}).get("last_delete"):
        data["last_delete"] = host.weights_cache["last_delete"]
    Host.objects.filter(pk=host.pk).update(weights_cache=data, weights_cache_at=timezone.now(),
                                           weights_cache_error="")  # fmt: skip
    host.weights_cache = data
    return data


def _model_row(m: inventory.CachedModel) -> dict:
    revisions = [
        {"commit": r.commit, "refs": list(r.refs), "size": r.size_on_disk, "files": r.files,
         "last_modified": r.last_modified}
        for r in m.revisions
    ]  # fmt: skip
    return {"repo": m.repo_id, "size": m.size_on_disk, "partial": m.partial_bytes,
            "last_accessed": m.last_accessed, "revisions": revisions}  # fmt: skip


def in_use(host: Host, repo_id: str, commits: list[str] | None = None) -> str | None:
    """Why a model (or some of its revisions) may not be deleted from the host now: an
    active run serves it, or a download of it is under way. None when nothing uses it."""
    runs = Run.objects.active().on(host).filter(recipe__model_id=repo_id)
    for run in runs.select_related("recipe"):
        commit = (run.facts.get("weights") or {}).get("commit")
        if commits is None or commit is None or commit in commits:
            return f"run {run.pk} ({run.recipe}, {run.get_state_display().lower()}) uses it"
    if Prefetch.objects.filter(host=host, repo_id=repo_id, state__in=Prefetch.ACTIVE).exists():
        return "a download of it is under way"
    return None


def delete(host: Host, repo_id: str, commits: list[str] | None = None) -> int:
    """Delete a model (or some revisions) from the host's cache, in its worker; refused
    while in use. Returns the bytes freed and rescans."""
    home = hf_home(host)
    if home is None:
        raise WeightsFailed("no_cache", f"{host.name} has no Hugging Face cache set.")
    reason = in_use(host, repo_id, commits)
    if reason:
        raise WeightsFailed("in_use", f"{repo_id} was not deleted: {reason}.",
                            "Stop the run (or cancel the download) first.")  # fmt: skip
    try:
        freed = inventory.delete(cache.hub_cache(home), repo_id, commits)
    except ValueError as exc:
        raise WeightsFailed("not_cached", str(exc)) from None
    what = repo_id if commits is None else f"{len(commits)} revision(s) of {repo_id}"
    host.weights_cache = {**(host.weights_cache or {}), "last_delete": {
        "text": f"Deleted {what}: {gb(freed)} freed.", "ok": True, "at": time.time()}}  # fmt: skip
    scan(host)
    return freed


def record_refusal(host: Host, exc: WeightsFailed) -> None:
    """A deletion the worker refused (a run started meanwhile), for the cache page."""
    data = {**(host.weights_cache or {}), "last_delete": {
        "text": f"{exc.reason} {exc.advice}".strip(), "ok": False, "at": time.time()}}  # fmt: skip
    Host.objects.filter(pk=host.pk).update(weights_cache=data)


def recipes_using(models: list[dict]) -> dict[str, list]:
    """The recipes whose model each cached repository is (for the inventory's page)."""
    repos = [m["repo"] for m in models]
    out: dict[str, list] = {repo: [] for repo in repos}
    for recipe in Recipe.objects.filter(model_id__in=repos).order_by("name"):
        out[recipe.model_id].append(recipe)
    return out


def cache_context(host: Host) -> dict:
    """What the host's model-cache page shows: the last scan with the recipes using each
    model and what would stop its deletion, and the downloads under way or just ended."""
    data = host.weights_cache or {}
    models = [dict(m) for m in data.get("models", [])]
    using = recipes_using(models)
    for m in models:
        m["recipes"] = using.get(m["repo"], [])
        m["in_use"] = in_use(host, m["repo"])
        m["last_accessed_at"] = _when(m.get("last_accessed"))
        m["revisions"] = [{**r, "at": _when(r.get("last_modified"))} for r in m["revisions"]]
    free, total = data.get("free_bytes"), data.get("total_bytes")
    prefetches = list(
        Prefetch.objects.filter(host=host).select_related("recipe", "requested_by")[:8]
    )
    return {
        "host": host, "models": models, "cache_path": data.get("path", host.hf_cache_path),
        "free_bytes": free, "total_bytes": total,
        "used_percent": 100 * (1 - free / total) if free is not None and total else None,
        "cached_bytes": sum(m["size"] for m in models), "warnings": data.get("warnings", []),
        "scanned_at": host.weights_cache_at, "scan_error": host.weights_cache_error,
        "last_delete": data.get("last_delete"), "prefetches": prefetches,
        "reserve_bytes": settings.WEIGHTS_DISK_RESERVE_BYTES,
    }  # fmt: skip


def _when(timestamp) -> datetime | None:
    if not isinstance(timestamp, int | float):
        return None
    return datetime.fromtimestamp(timestamp, tz=UTC)


# --- "Download now" -----------------------------------------------------------------------


def prefetch(prefetch_id: int, *, changed: Callable[[str], None] = lambda host: None) -> None:
    """A recipe's weights into a host's cache without a start (its worker runs this);
    cancelled by `cancel_requested`, progress in `Prefetch.progress`; `changed(host name)`
    after each step (the live push)."""
    item = Prefetch.objects.select_related("host", "recipe").get(pk=prefetch_id)
    if item.state != Prefetch.State.QUEUED and item.state != Prefetch.State.DOWNLOADING:
        return
    if item.cancel_requested:
        _finish(item, Prefetch.State.CANCELLED)
        return
    Prefetch.objects.filter(pk=item.pk).update(state=Prefetch.State.DOWNLOADING)
    changed(item.host.name)
    last_check, cancelled = 0.0, False

    def progress(report: dict) -> None:
        Prefetch.objects.filter(pk=item.pk).update(progress=report)
        changed(item.host.name)

    def should_stop() -> bool:
        nonlocal last_check, cancelled
        if not cancelled and time.monotonic() - last_check >= 0.5:
            last_check = time.monotonic()
            cancelled = Prefetch.objects.filter(pk=item.pk, cancel_requested=True).exists()
        return cancelled

    try:
        fetched = fetch(item.host, item.repo_id, item.revision, on_progress=progress,
                        should_stop=should_stop)  # fmt: skip
    except transfer.DownloadStopped:
        _finish(item, Prefetch.State.CANCELLED)
    except WeightsFailed as exc:
        _finish(item, Prefetch.State.FAILED, error=exc.reason, advice=exc.advice)
    else:
        _finish(item, Prefetch.State.DONE, commit=fetched.commit)
    try:
        scan(item.host)
    except Exception:  # the download's outcome stands; the next scan catches up
        log.exception("scanning %s's cache after a download", item.host.name)
    changed(item.host.name)


def _finish(item: Prefetch, state: str, **fields) -> None:
    Prefetch.objects.filter(pk=item.pk).update(state=state, finished_at=timezone.now(), **fields)
