"""Fetch a plan's missing files into the cache: resumable, stoppable, with progress.

Bytes travel through `huggingface_hub`'s own `http_get` (its redirects to the CDN, its
retries with `Range` after a broken connection, its size check), into the cache's
`blobs/<etag>.incomplete` — one stable name per file, not the client's per-process
temporary file, so a worker killed mid-download, or a stop, leaves a partial that the next
download resumes from where it ended (`Range: bytes=<size>-`). A finished file is
fsync'd, renamed to its blob and linked into the snapshot; only then does it count.

Several files travel at once (`workers`). `should_stop()` is asked at every chunk; a
stop raises `DownloadStopped` and keeps the partials. A file lock per blob keeps two
downloads on one Spark from writing the same partial.
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
    """Progress shared by the transfer threads; reports at most every `every_s`."""

    def __init__(self, plan: DownloadPlan, on_progress, should_stop, every_s: float) -> None:
        self.lock = threading.Lock()
        self.progress = Progress(
            total_bytes=plan.total_bytes, done_bytes=plan.total_bytes - plan.missing_bytes,
            files={f.entry.path: [f.have, f.entry.size] for f in plan.files if f.missing},
        )  # fmt: skip
        self.samples = collections.deque([(time.monotonic(), 0)])
        self.on_progress, self.should_stop, self.every_s = on_progress, should_stop, every_s
        self.last_report = 0.0
        self.stopping = threading.Event()  # a stop or another file's failure

    def add(self, path: str, n: int) -> None:
        if self.stopping.is_set() or (self.should_stop is not None and self.should_stop()):
            self.stopping.set()
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
            if now - self.last_report >= self.every_s:
                self._report(now)

    def mark(self, path: str, active: bool) -> None:
        with self.lock:
            if active:
                self.progress.active.append(path)
            elif path in self.progress.active:
                self.progress.active.remove(path)
            self._report(time.monotonic())

    def _report(self, now: float) -> None:
        p = self.progress
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        p.rate_bps = (b1 - b0) / (t1 - t0) if t1 - t0 > 0.2 else p.rate_bps
        p.eta_s = (p.total_bytes - p.done_bytes) / p.rate_bps if p.rate_bps else None
        self.last_report = now
        if self.on_progress is not None:
            self.on_progress(p.as_dict())


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
    `DownloadStopped`, or `HubError` (the first file's failure; the others stop)."""
    tracker = _Tracker(plan, on_progress, should_stop, report_every_s)
    todo = sorted((f for f in plan.files if f.missing), key=lambda f: -f.missing)
    headers = build_hf_headers(token=token or False)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(_fetch, plan, f, headers, tracker) for f in todo]
        errors = []
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
            except BaseException as exc:
                tracker.stopping.set()  # the others end at their next chunk
                errors.append(exc)
    if errors:
        # The first real failure; a stop only when nothing else went wrong.
        failures = [e for e in errors if not isinstance(e, DownloadStopped)]
        raise (failures or errors)[0]
    for f in plan.files:  # bytes another commit fetched: this commit's snapshot links them
        if not cache.is_complete(plan.cache, f.entry) and cache.has_blob(plan.cache, f.entry):
            cache.link_blob(plan.cache, f.entry)
    cache.write_ref(plan.cache, plan.repo_id, plan.revision, plan.commit)
    with tracker.lock:
        tracker.progress.finished = True
        tracker._report(time.monotonic())
    return tracker.progress


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
