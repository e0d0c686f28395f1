"""What a Spark's Hugging Face cache holds, and deleting from it (huggingface_hub's own
cache scan and delete strategy, so the answer is the one `hf cache scan` gives)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from hf_adapter import cache


@dataclass(frozen=True)
class CachedRevision:
    commit: str
    refs: tuple[str, ...]
    size_on_disk: int
    files: int
    last_modified: float


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    size_on_disk: int  # blobs shared by revisions counted once
    partial_bytes: int  # downloads under way or interrupted (.incomplete)
    last_accessed: float
    revisions: tuple[CachedRevision, ...]


@dataclass(frozen=True)
class Inventory:
    models: tuple[CachedModel, ...]
    free_bytes: int
    total_bytes: int
    warnings: tuple[str, ...]  # folders the scan could not read


def scan(hub_cache: Path) -> Inventory:
    hub_cache = Path(hub_cache)
    usage = cache.volume_usage(hub_cache)
    try:
        info = scan_cache_dir(hub_cache)
    except CacheNotFound:
        return Inventory(models=(), free_bytes=usage.free, total_bytes=usage.total, warnings=())
    models = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        revisions = tuple(
            CachedRevision(
                commit=r.commit_hash,
                refs=tuple(sorted(r.refs)),
                size_on_disk=r.size_on_disk,
                files=r.nb_files,
                last_modified=r.last_modified,
            )
            for r in sorted(repo.revisions, key=lambda r: -r.last_modified)
        )
        partial = cache.partials_bytes(hub_cache, repo.repo_id)
        models.append(CachedModel(repo_id=repo.repo_id, size_on_disk=repo.size_on_disk,
                                  partial_bytes=partial, last_accessed=repo.last_accessed,
                                  revisions=revisions))  # fmt: skip
    warnings = tuple(str(w) for w in info.warnings)
    return Inventory(models=tuple(models), free_bytes=usage.free, total_bytes=usage.total,
                     warnings=warnings)  # fmt: skip


def delete(hub_cache: Path, repo_id: str, commits: list[str] | None = None) -> int:
    """Delete revisions (`commits`) of a model, or the whole model with its partial
    downloads (`None`); returns the bytes freed. Blobs another kept revision uses stay."""
    hub_cache = Path(hub_cache)
    info = scan_cache_dir(hub_cache)
    repo = next((r for r in info.repos if r.repo_id == repo_id and r.repo_type == "model"), None)
    if repo is None:
        return 0
    wanted = [r.commit_hash for r in repo.revisions] if commits is None else list(commits)
    unknown = set(wanted) - {r.commit_hash for r in repo.revisions}
    if unknown:
        raise ValueError(f"{repo_id} has no cached revision {', '.join(sorted(unknown))}")
    strategy = info.delete_revisions(*wanted)
    freed = strategy.expected_freed_size
    strategy.execute()
    if commits is None:
        freed += cache.partials_bytes(hub_cache, repo_id)
        shutil.rmtree(cache.repo_dir(hub_cache, repo_id), ignore_errors=True)
    return freed
