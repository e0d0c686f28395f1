"""What the start-up prediction needs of a model on the hub or in a host's cache: its
config.json and the size of the weight files vLLM loads (vLLM ≥ 0.20 prints it:
"Checkpoint size: X GiB", the sum of the safetensors files it reads).

- From the cache first (a snapshot already there: no network);
- else from the hub: the listing and the selection the panel's downloads use (plan.py),
  and config.json fetched into the cache (bounded).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hf_adapter import cache as hub_cache_layout
from hf_adapter.errors import HubError, translate
from hf_adapter.plan import check_names, plan_download
from sparkdomain.snapshot import SnapshotError, read_json, read_snapshot


@dataclass(frozen=True)
class ModelFacts:
    repo_id: str
    commit: str
    config: dict
    checkpoint_bytes: int | None  # None: the weight files are not known
    source: str  # "cache" or "hub"


def _read_config(path: Path) -> dict:
    try:
        return read_json(path, "config.json")
    except SnapshotError as exc:
        raise HubError("bad_config", str(exc)) from None


def from_cache(repo_id: str, revision: str, hub_cache: Path) -> ModelFacts | None:
    """The snapshot of `revision` in the cache (a ref or a commit), if it has config.json
    (sparkdomain/snapshot.py: the weights' size from the safetensors files, else from the
    index's total size)."""
    check_names(repo_id, revision)
    try:
        found = read_snapshot(hub_cache, repo_id, revision)
    except SnapshotError as exc:
        raise HubError("bad_config", str(exc)) from None
    if found is None:
        return None
    return ModelFacts(repo_id, found.commit, found.config, found.size_bytes, "cache")


def model_facts(repo_id: str, revision: str, *, hub_cache: Path, endpoint: str,
                token: str | None, offline: bool) -> ModelFacts:  # fmt: skip
    cached = from_cache(repo_id, revision, hub_cache)
    if cached is not None:
        return cached
    if offline:
        raise HubError(
            "offline",
            f"{repo_id}'s config.json is not in the cache and the hub is off (HF_HUB_OFFLINE)",
        )
    plan = plan_download(repo_id, revision, hub_cache=hub_cache, endpoint=endpoint, token=token)
    weights = sum(f.entry.size for f in plan.files if f.entry.path.endswith(".safetensors"))
    from huggingface_hub import hf_hub_download

    try:
        path = hf_hub_download(
            repo_id, "config.json", revision=plan.commit, cache_dir=str(hub_cache),
            endpoint=endpoint, token=token or False,
        )  # fmt: skip
    except Exception as exc:  # huggingface_hub's and the network's, translated
        raise translate(exc, repo_id, revision, endpoint) from exc
    hub_cache_layout.write_ref(hub_cache, repo_id, revision, plan.commit)  # for offline asks
    return ModelFacts(repo_id, plan.commit, _read_config(Path(path)), weights or None, "hub")
