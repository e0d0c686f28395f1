"""The Hugging Face cache layout (`HF_HOME/hub`), as `huggingface_hub` and vLLM read it.

    models--<org>--<name>/blobs/<etag>                  a file's bytes (etag: the sha256 of
                                                         an LFS file, else its git blob id)
    models--<org>--<name>/blobs/<etag>.incomplete       a download under way (ours: one
                                                         stable name, so a later process
                                                         resumes it; never counted as there)
    models--<org>--<name>/snapshots/<commit>/<path>     a relative symlink to its blob
    models--<org>--<name>/refs/<branch>                 the commit a branch pointed to
    .locks/models--<org>--<name>/<etag>.lock            one download per blob at a time

A file is in the cache when its snapshot link resolves to a blob of the file's size.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

INCOMPLETE = ".incomplete"


@dataclass(frozen=True)
class Entry:
    """One file of one commit, where the cache keeps it."""

    repo_id: str
    commit: str
    path: str
    size: int
    etag: str


def hub_cache(hf_home: str | os.PathLike) -> Path:
    """The hub cache of a Hugging Face home (what vLLM's containers mount)."""
    return Path(hf_home) / "hub"


def repo_dir(cache: Path, repo_id: str) -> Path:
    return Path(cache) / ("models--" + repo_id.replace("/", "--"))


def blob_path(cache: Path, entry: Entry) -> Path:
    return repo_dir(cache, entry.repo_id) / "blobs" / entry.etag


def incomplete_path(cache: Path, entry: Entry) -> Path:
    return repo_dir(cache, entry.repo_id) / "blobs" / (entry.etag + INCOMPLETE)


def lock_path(cache: Path, entry: Entry) -> Path:
    """Where huggingface_hub keeps its locks too (outside the repository's folder, which
    the cache scan reads)."""
    return Path(cache) / ".locks" / repo_dir(cache, entry.repo_id).name / (entry.etag + ".lock")


def snapshot_path(cache: Path, entry: Entry) -> Path:
    return repo_dir(cache, entry.repo_id) / "snapshots" / entry.commit / entry.path


def snapshot_dir(cache: Path, repo_id: str, commit: str) -> Path:
    return repo_dir(cache, repo_id) / "snapshots" / commit


def is_complete(cache: Path, entry: Entry) -> bool:
    link = snapshot_path(cache, entry)
    try:
        return link.stat().st_size == entry.size  # follows the link to its blob
    except OSError:
        return False


def has_blob(cache: Path, entry: Entry) -> bool:
    """The bytes are there, linked or not (another commit of the repository shares them)."""
    try:
        return blob_path(cache, entry).stat().st_size == entry.size
    except OSError:
        return False


def partial_bytes(cache: Path, entry: Entry) -> int:
    """Bytes of a download under way that a resume keeps (0 when none, or when the partial
    is longer than the file: it is then started over)."""
    try:
        size = incomplete_path(cache, entry).stat().st_size
    except OSError:
        return 0
    return size if size <= entry.size else 0


def place(cache: Path, entry: Entry) -> None:
    """A finished download into the cache: its blob under the ETag, the snapshot's link."""
    blob = blob_path(cache, entry)
    partial = incomplete_path(cache, entry)
    if partial.exists():
        os.replace(partial, blob)
    link_blob(cache, entry)


def link_blob(cache: Path, entry: Entry) -> None:
    """The snapshot's relative symlink to the blob (an existing blob: a file two commits or
    two repositories share is fetched once per repository)."""
    blob = blob_path(cache, entry)
    link = snapshot_path(cache, entry)
    link.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(blob, link.parent)
    tmp = link.with_name(link.name + ".link-tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # atomic: a reader sees the old link or the new one


def write_ref(cache: Path, repo_id: str, revision: str, commit: str) -> None:
    """refs/<revision> = commit, for a branch or tag (a commit hash needs no ref)."""
    if revision == commit:
        return
    ref = repo_dir(cache, repo_id) / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(ref.name + ".tmp")
    tmp.write_text(commit)
    os.replace(tmp, ref)


def partials_bytes(cache: Path, repo_id: str) -> int:
    """All of a model's downloads under way or interrupted."""
    blobs = repo_dir(cache, repo_id) / "blobs"
    return sum(p.stat().st_size for p in blobs.glob("*" + INCOMPLETE))


def volume_usage(path: Path):
    """`shutil.disk_usage` of the filesystem `path` is on, or will be on once created (its
    nearest existing folder)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path)
