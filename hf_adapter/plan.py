"""What a download of one model at one revision will fetch, before fetching it.

`plan_download` asks the hub three things — the commit a revision points to (model info),
the repository's files with sizes and ETags (the tree), and, when there is one, the small
`model.safetensors.index.json` (its weight map decides the shards) — then chooses the files
vLLM needs (`sparkdomain.weights.select`) and compares them with the cache: what is
complete, what is partly there (a resumable `.incomplete`), what is missing. The missing
bytes are what disk admission compares with the free space.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile as HubFile

from hf_adapter import cache
from hf_adapter.errors import HubError, translate
from sparkdomain import flags as weights_flags
from sparkdomain import weights

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
INDEX_MAX_BYTES = 16 * 1024 * 1024  # a weight map is kilobytes; this bounds a hostile one


@dataclass(frozen=True)
class PlannedFile:
    entry: cache.Entry
    have: int  # bytes already in the cache for it (its size when complete)

    @property
    def missing(self) -> int:
        return self.entry.size - self.have


@dataclass
class DownloadPlan:
    repo_id: str
    revision: str  # as asked (a branch, a tag or a commit)
    commit: str  # what it resolved to: every run records this
    endpoint: str
    cache: Path
    files: list[PlannedFile]
    selection: weights.Selection

    @property
    def total_bytes(self) -> int:
        return sum(f.entry.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        return sum(f.missing for f in self.files)

    @property
    def complete(self) -> bool:
        return self.missing_bytes == 0

    def free_bytes(self) -> int:
        """Free space of the cache's filesystem."""
        return cache.volume_usage(self.cache).free


def check_names(repo_id: str, revision: str) -> None:
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise HubError("bad_repo_id", f"{repo_id!r} is not a model id (org/name).")
    if not revision or weights_flags.validate_revision(revision):
        raise HubError("bad_revision", f"{revision!r} is not a branch, tag or commit name.")


def plan_download(
    repo_id: str, revision: str, *, hub_cache: Path, endpoint: str, token: str | None
) -> DownloadPlan:
    check_names(repo_id, revision)
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        commit = api.model_info(repo_id, revision=revision).sha
        listing = [f for f in api.list_repo_tree(repo_id, revision=commit, recursive=True)
                   if isinstance(f, HubFile)]  # fmt: skip
        files = [_repo_file(f) for f in listing]
        weight_map = _weight_map(api, repo_id, commit, files, hub_cache)
    except HubError:
        raise
    except Exception as exc:  # huggingface_hub's and the network's, translated
        raise translate(exc, repo_id, revision, endpoint) from exc
    try:
        selection = weights.select(files, weight_map)
    except weights.WeightsError as exc:
        raise HubError("no_weights", f"{repo_id} at {commit[:12]}: {exc}") from None
    etags = {f.path: _etag(f) for f in listing}
    planned = []
    for f in selection.files:
        entry = cache.Entry(repo_id=repo_id, commit=commit, path=f.path, size=f.size,
                            etag=etags[f.path])  # fmt: skip
        # The blob, linked into this commit's snapshot or not yet (another commit's).
        have = f.size if cache.has_blob(hub_cache, entry) else cache.partial_bytes(hub_cache, entry)
        planned.append(PlannedFile(entry=entry, have=have))
    return DownloadPlan(repo_id=repo_id, revision=revision, commit=commit, endpoint=endpoint,
                        cache=Path(hub_cache), files=planned, selection=selection)  # fmt: skip


def _repo_file(f: HubFile) -> weights.RepoFile:
    parts = f.path.split("/")
    if f.path.startswith("/") or "\\" in f.path or any(p in ("", ".", "..") for p in parts):
        raise HubError("bad_listing", f"the hub listed a file path no repository has: {f.path!r}")
    return weights.RepoFile(path=f.path, size=int(f.size))


def _etag(f: HubFile) -> str:
    etag = f.lfs.sha256 if f.lfs is not None else f.blob_id
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", etag or ""):
        raise HubError("bad_listing", f"the hub listed {f.path!r} without a usable ETag")
    return etag


def _weight_map(api: HfApi, repo_id: str, commit: str, files, hub_cache: Path) -> dict | None:
    """The index's weight map; the index is fetched into the cache by the client itself
    (a small file, in the cache's own layout)."""
    index = next((f for f in files if f.path == weights.INDEX_FILE), None)
    if index is None:
        return None
    if index.size > INDEX_MAX_BYTES:
        raise HubError("bad_listing", f"{weights.INDEX_FILE} is {index.size} bytes: not an index")
    path = api.hf_hub_download(repo_id, weights.INDEX_FILE, revision=commit,
                               cache_dir=str(hub_cache))  # fmt: skip
    try:
        return json.loads(Path(path).read_text())["weight_map"] or {}
    except (ValueError, KeyError, TypeError) as exc:
        raise HubError(
            "bad_listing", f"{weights.INDEX_FILE} is not a weight index: {exc}"
        ) from None
