"""A model snapshot in a Hugging Face hub cache, read as vLLM reads it before loading: the
model's config.json, the quantization config a ModelOpt checkpoint ships beside it
(hf_quant_config.json), and the size of the weights — the safetensors files when they are
there (vLLM ≥ 0.20 prints their sum: "Checkpoint size: X GiB"), else the
`metadata.total_size` of model.safetensors.index.json (the tensors' bytes, which a cache
holding only the small files still has).

The cache layout is huggingface_hub's: `models--ORG--NAME/refs/REVISION` holds the commit,
`snapshots/COMMIT/` the files. Pure and bounded (each JSON file at most 4 MiB); used by the
hub adapter (hf_adapter/facts.py) and by sparksim, which loads what vLLM would load.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

JSON_MAX_BYTES = 4 * 1024 * 1024
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[A-Za-z0-9][\w.\-]{0,95}$")


class SnapshotError(ValueError):
    """A file of the snapshot cannot be read as what it should be."""


@dataclass(frozen=True)
class Snapshot:
    repo_id: str
    commit: str
    folder: Path
    config: dict
    quant_config: dict | None
    size_bytes: int | None
    size_from: str  # "files", "index" or "" (unknown)


def hub_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where huggingface_hub (and vLLM) look: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def read_json(path: Path, what: str) -> dict:
    if path.stat().st_size > JSON_MAX_BYTES:
        raise SnapshotError(f"{what} is over {JSON_MAX_BYTES >> 20} MiB")
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"{what} is not a JSON object")
    return data


def read_snapshot(hub_cache: Path, repo_id: str, revision: str = "main") -> Snapshot | None:
    """The snapshot of `revision` (a ref or a commit) if the cache has its config.json."""
    if not _NAME.match(repo_id) or ".." in repo_id:
        return None
    folder = Path(hub_cache) / ("models--" + repo_id.replace("/", "--"))
    ref = folder / "refs" / revision
    commit = ref.read_text().strip() if "/" not in revision and ref.is_file() else revision
    if not _COMMIT.match(commit):
        return None
    snapshot = folder / "snapshots" / commit
    config_path = snapshot / "config.json"
    if not config_path.is_file():
        return None
    config = read_json(config_path, "config.json")
    quant_path = snapshot / "hf_quant_config.json"
    quant = read_json(quant_path, "hf_quant_config.json") if quant_path.is_file() else None
    shards = [p for p in snapshot.rglob("*.safetensors") if p.is_file()]
    size, size_from = (sum(p.stat().st_size for p in shards), "files") if shards else (None, "")
    index_path = snapshot / "model.safetensors.index.json"
    if size is None and index_path.is_file():
        total = read_json(index_path, "model.safetensors.index.json").get("metadata") or {}
        value = total.get("total_size") if isinstance(total, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            size, size_from = int(value), "index"
    return Snapshot(repo_id, commit, snapshot, config, quant, size, size_from)


def with_quantization(config: dict, quant_config: dict | None) -> dict:
    """config.json with a ModelOpt hf_quant_config.json folded in as its
    `quantization_config` (what vLLM's ModelOpt loader reads), unless it has one."""
    if not quant_config or config.get("quantization_config"):
        return config
    q = (
        quant_config.get("quantization")
        if isinstance(quant_config.get("quantization"), dict)
        else {}
    )
    merged = {"quant_method": "modelopt", **q}
    return {**config, "quantization_config": merged}
