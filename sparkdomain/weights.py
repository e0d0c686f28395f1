"""Which files of a model repository vLLM needs, so a download fetches those and no more.

A repository often holds the same weights twice or three times (safetensors and
PyTorch `.bin`, sharded and `consolidated`, an `original/` folder for another runtime):
sparkrun's cache fetches 65 instead of 196 GB for one model by choosing. The choice here is
the one vLLM 0.33's default loader makes for `--load-format auto`
(`DefaultModelLoader._prepare_weights` and `weight_utils.download_weights_from_hf`),
so a container started with the hub offline finds every weight it opens:

1. "mistral" format when any file's *name* matches `consolidated*.safetensors`: those
   files, matched on the whole path (vLLM's `snapshot_download(allow_patterns=…)`).
2. Otherwise, with `model.safetensors.index.json` at the top level: exactly the files its
   `weight_map` names (and the index itself).
3. Otherwise the first of `*.safetensors`, `*.bin`, `*.pt` that matches a top-level file,
   then every file in the repository matching it (`*` crosses folders in fnmatch, as in
   huggingface_hub's filter).

Besides the weights, every top-level file that is not a weight file of any format: the
configs (`config.json`, `generation_config.json`, quantization configs), the tokenizer
and chat template, and code for `--trust-remote-code`. Files in folders are skipped
unless rule 1 or 3 picked them.

`tests/sparkdomain/test_weights.py` checks the choice against real vLLM's own download
code run on a local hub.

`disk_refusal` is the admission rule for the bytes still missing: refused, with the
numbers, unless they fit on the cache's volume with `DISK_RESERVE_BYTES` left free.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field

INDEX_FILE = "model.safetensors.index.json"  # vLLM's SAFE_WEIGHTS_INDEX_NAME
HF_PATTERNS = ("*.safetensors", "*.bin", "*.pt")  # "hf" format, with vLLM's .pt fallback
MISTRAL_PATTERN = "consolidated*.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".onnx", ".h5",
                   ".msgpack", ".ckpt", ".npz", ".tflite", ".ot")  # fmt: skip
MAX_FILES = 100_000  # a listing longer than any model's is refused, not walked


class WeightsError(ValueError):
    pass


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int


@dataclass
class Selection:
    """The files to fetch (`weights` and `support`) and those left on the hub with why."""

    format: str  # "mistral", "safetensors-index" or the pattern used ("*.safetensors", …)
    weights: list[RepoFile] = field(default_factory=list)
    support: list[RepoFile] = field(default_factory=list)
    skipped: list[tuple[RepoFile, str]] = field(default_factory=list)

    @property
    def files(self) -> list[RepoFile]:
        return sorted(self.weights + self.support, key=lambda f: f.path)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.weights + self.support)

    @property
    def skipped_bytes(self) -> int:
        return sum(f.size for f, _ in self.skipped)

    @property
    def patterns(self) -> list[str]:
        """Exact paths, for huggingface_hub's `allow_patterns`."""
        return [f.path for f in self.files]


def is_weight_file(path: str) -> bool:
    return path.lower().endswith(WEIGHT_SUFFIXES)


def select(files: list[RepoFile], weight_map: dict[str, str] | None = None) -> Selection:
    """The files vLLM needs from a repository listing (recursive, with sizes).
    `weight_map`: the `weight_map` of `model.safetensors.index.json` when the listing has
    one at the top level (the caller downloads that small file first)."""
    if len(files) > MAX_FILES:
        raise WeightsError(f"{len(files)} files in the repository: more than {MAX_FILES}")
    top = [f for f in files if "/" not in f.path]
    fmt, chosen = _weights(files, top, weight_map)
    if not chosen:
        raise WeightsError(_no_weights(files))
    picked = {f.path for f in chosen}
    support = [f for f in top if not is_weight_file(f.path) and f.path not in picked]
    support_paths = {f.path for f in support}
    skipped = [(f, _why_skipped(f, fmt)) for f in files
               if f.path not in picked and f.path not in support_paths]  # fmt: skip
    return Selection(format=fmt, weights=sorted(chosen, key=lambda f: f.path),
                     support=sorted(support, key=lambda f: f.path), skipped=skipped)  # fmt: skip


def _weights(files, top, weight_map) -> tuple[str, list[RepoFile]]:
    if any(fnmatch.fnmatch(posixpath.basename(f.path), MISTRAL_PATTERN) for f in files):
        return "mistral", [f for f in files if fnmatch.fnmatch(f.path, MISTRAL_PATTERN)]
    if any(f.path == INDEX_FILE for f in top):
        if weight_map is None:
            raise WeightsError(f"{INDEX_FILE} is in the repository: its weight_map is needed")
        named = set(weight_map.values())
        if named:
            chosen = [f for f in files if f.path in named]
            missing = named - {f.path for f in chosen}
            if missing:
                raise WeightsError(f"{INDEX_FILE} names files the repository does not have: "
                                   f"{', '.join(sorted(missing)[:5])}")  # fmt: skip
            return "safetensors-index", chosen
        return "*.safetensors", [f for f in files if fnmatch.fnmatch(f.path, "*.safetensors")]
    for pattern in HF_PATTERNS:
        if any(fnmatch.fnmatch(f.path, pattern) for f in top):
            return pattern, [f for f in files if fnmatch.fnmatch(f.path, pattern)]
    return "none", []


def _why_skipped(f: RepoFile, fmt: str) -> str:
    if is_weight_file(f.path):
        return f"weights in another format or copy than the {fmt} ones vLLM loads"
    return "in a folder vLLM does not read"


def _no_weights(files: list[RepoFile]) -> str:
    kinds = ", ".join(sorted({posixpath.splitext(f.path)[1] or f.path for f in files})[:10])
    return ("no weights vLLM can load (*.safetensors, *.bin or *.pt at the top level, or "
            f"consolidated*.safetensors); the repository has: {kinds or 'nothing'}")  # fmt: skip


# --- disk admission -----------------------------------------------------------------------

# Left free on the cache's volume after a download: a Spark's cache usually shares the
# system disk, and a full root filesystem stops the machine, not just the download.
DISK_RESERVE_BYTES = 10 * 10**9


def gb(n: int) -> str:
    return f"{n / 10**9:.1f} GB"


def disk_refusal(
    missing_bytes: int, free_bytes: int, host: str, reserve_bytes: int = DISK_RESERVE_BYTES
) -> str | None:
    """Why a download may not start on `host`, in numbers — or None when it fits with the
    reserve left over. Asked before the first byte, so a full disk never fails it halfway."""
    if missing_bytes <= 0 or missing_bytes + reserve_bytes <= free_bytes:
        return None
    return (
        f"needs {gb(missing_bytes)}, {gb(free_bytes)} free on {host} (keeping "
        f"{gb(reserve_bytes)} free for the system) — delete cached models to make room"
    )
