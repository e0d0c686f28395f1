"""Fetch a plan's missing files into the cache: resumable, stoppable, with progress.

Bytes travel through `huggingface_hub`'s own `http_get` (its redirects to the CDN, its
retries with `Range` after a broken connection, its size check), into the cache's
`blobs/<etag>.incomplete` — one stable name per file, not the client's per-process
temporary file, so a worker killed mid-download, or a stop, leaves a partial that the next
download resumes from where it ended (`Range: bytes=<size>-`). A finished file is
fsync'd, renamed to its blob and linked into the snapshot; only then does it count.

Several files travel at once (`workers`); files with the same content (one blob) travel
once. `should_stop()` and `on_progress()` are called in the caller's thread every
`report_every_s` (never in a transfer thread: a caller's database and pushes stay in its
own thread); a stop ends each transfer at its next chunk, raises `DownloadStopped` and
keeps the partials. A file lock per blob keeps two downloads on one Spark from writing the
same partial.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import filelock
from huggingface_hub import hf_hub_url
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import build_hf_headers

from hf_adapter import cache
from hf_adapter.errors import HubError, translate
from hf_adapter.plan import DownloadPlan, PlannedFile

RATE_WINDOW_S = 10.0
LOCK_TIMEOUT_S = 0.5


class DownloadStopped(Exception):
    """`should_stop()` said so; what was fetched is kept for a resume."""


@dataclass
class Progress:
    total_bytes: int
    done_bytes: int  # in the cache now, partials included
    fetched_bytes: int = 0  # by this download
    rate_bps: float | None = None
    eta_s: float | None = None
    files: dict[str, list[int]] = field(default_factory=dict)  # path → [done, size]
    active: list[str] = field(default_factory=list)
    finished: bool = False

    def as_dict(self) -> dict:
        return {
            "total_bytes": self.total_bytes, "done_bytes": self.done_bytes,
            "fetched_bytes": self.fetched_bytes, "rate_bps": self.rate_bps, "eta_s": self.eta_s,
            "files": {p: list(v) for p, v in self.files.items()}, "active": list(self.active),
            "finished": self.finished,
        }  # fmt: skip


class _Tracker:
    """Progress shared by the transfer threads. They only count bytes and look at
    `stopping`; the calling thread reads snapshots and asks `should_stop` (so a caller's
    callbacks — a database write, a push — always run in its own thread)."""

    def __init__(self, plan: DownloadPlan) -> None:
        self.lock = threading.Lock()
        self.progress = Progress(
            total_bytes=plan.total_bytes, done_bytes=plan.total_bytes - plan.missing_bytes,
            files={f.entry.path: [f.have, f.entry.size] for f in plan.files if f.missing},
        )  # fmt: skip
        self.samples = collections.deque([(time.monotonic(), 0)])
        self.stopping = threading.Event()  # a stop or another file's failure

    def add(self, path: str, n: int) -> None:
        if self.stopping.is_set():
            raise DownloadStopped()
        with self.lock:
            p = self.progress
            p.files[path][0] += n
            p.done_bytes += n
            p.fetched_bytes += n
            now = time.monotonic()
            self.samples.append((now, p.fetched_bytes))
            while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW_S:
                self.samples.popleft()

    def mark(self, path: str, active: bool) -> None:
        with self.lock:
            if active:
                self.progress.active.append(path)
            elif path in self.progress.active:
                self.progress.active.remove(path)

    def snapshot(self) -> dict:
        with self.lock:
            p = self.progress
            (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
            p.rate_bps = (b1 - b0) / (t1 - t0) if t1 - t0 > 0.2 else p.rate_bps
            p.eta_s = (p.total_bytes - p.done_bytes) / p.rate_bps if p.rate_bps else None
            return p.as_dict()


class _Bar:
    """What `http_get` reports chunks to (it takes any callable for a progress bar)."""

    def __init__(self, tracker: _Tracker, path: str) -> None:
        self.tracker, self.path = tracker, path

    def __call__(self, **_kwargs) -> _Bar:
        return self

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def update(self, n: int) -> None:
        if n:  # negative when a server ignored the Range and the file starts over
            self.tracker.add(self.path, n)


def download(
    plan: DownloadPlan,
    *,
    token: str | None,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    workers: int = 4,
    report_every_s: float = 0.5,
) -> Progress:
    """Fetch what `plan` lacks; returns the final progress (finished). Raises
    `DownloadStopped`, or `HubError` (the first file's failure; the others stop).
    `on_progress` and `should_stop` are called in this thread, every `report_every_s`."""
    tracker = _Tracker(plan)
    # Files with the same content (two `{}` configs) share one blob: fetched once.
    todo, copies, etags = [], [], set()
    for f in sorted((f for f in plan.files if f.missing), key=lambda f: -f.missing):
        (copies if f.entry.etag in etags else todo).append(f)
        etags.add(f.entry.etag)
    headers = build_hf_headers(token=token or False)
    errors: list[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending = {pool.submit(_fetch, plan, f, headers, tracker) for f in todo}
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=report_every_s)
            for future in done:
                if future.exception() is not None:
                    tracker.stopping.set()  # the others end at their next chunk
                    errors.append(future.exception())
            if not tracker.stopping.is_set() and should_stop is not None and should_stop():
                tracker.stopping.set()
            if on_progress is not None and pending:
                on_progress(tracker.snapshot())
    if tracker.stopping.is_set() and not errors:
        errors.append(DownloadStopped())
    if errors:
        # The first real failure; a stop only when nothing else went wrong.
        failures = [e for e in errors if not isinstance(e, DownloadStopped)]
        raise (failures or errors)[0]
    with tracker.lock:
        for f in copies:
            tracker.progress.files[f.entry.path][0] = f.entry.size
            tracker.progress.done_bytes += f.missing
    link_snapshot(plan)
    tracker.progress.finished = True
    final = tracker.snapshot()
    if on_progress is not None:
        on_progress(final)
    return tracker.progress


def link_snapshot(plan: DownloadPlan) -> None:
    """The plan's commit as the client finds it offline: each file whose bytes are in the
    cache (fetched now, by another commit or as another file's copy) linked into its
    snapshot, and the revision's ref. A plan with nothing missing needs only this."""
    for f in plan.files:
        if not cache.is_complete(plan.cache, f.entry) and cache.has_blob(plan.cache, f.entry):
            cache.link_blob(plan.cache, f.entry)
    cache.write_ref(plan.cache, plan.repo_id, plan.revision, plan.commit)


def _fetch(plan: DownloadPlan, planned: PlannedFile, headers: dict, tracker: _Tracker) -> None:
    entry = planned.entry
    blob = cache.blob_path(plan.cache, entry)
    partial = cache.incomplete_path(plan.cache, entry)
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock_file = cache.lock_path(plan.cache, entry)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(lock_file), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise HubError(
            "busy",
            f"Another download of {entry.path} is running on this Spark.",
            "Wait for it to finish, or stop the run that started it.",
        ) from None
    try:
        resume = cache.partial_bytes(plan.cache, entry)
        url = hf_hub_url(plan.repo_id, entry.path, revision=plan.commit, endpoint=plan.endpoint)
        tracker.mark(entry.path, active=True)
        # r+b, not append: http_get seeks back itself if a server ignores the Range.
        with open(partial, "r+b" if resume else "wb") as out:
            out.seek(resume)
            try:
                bar = _Bar(tracker, entry.path)
                http_get(url, out, resume_size=resume, headers=headers, expected_size=entry.size,
                         displayed_filename=entry.path, tqdm_class=bar)  # fmt: skip
            except (DownloadStopped, HubError):
                raise
            except Exception as exc:
                raise translate(exc, plan.repo_id, plan.revision, plan.endpoint) from exc
            out.flush()
            os.fsync(out.fileno())
        cache.place(plan.cache, entry)
    finally:
        tracker.mark(entry.path, active=False)
        lock.release()
