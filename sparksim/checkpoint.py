"""What vLLM would load for `vllm serve MODEL`: the model's snapshot in the Hugging Face
cache (HF_HUB_CACHE / HF_HOME — sparkdomain/snapshot.py), never a guess from its name.

From it sparksim takes the architecture the planner computes with (the wizard's config.json
importer, the parameter counts of the start-up model and the checkpoint's real size) and
the model class vLLM resolves; the start-up figures and refusals then follow vLLM's own
accounting for the command (vllm_adapter/startup: "Model loading took", "Available KV cache
memory", "GPU KV cache size", CUDA out of memory while loading, one sequence that does not
fit), so sparksim and `spark plan` agree by construction.
"""

from __future__ import annotations

import dataclasses
import logging

from sparkdomain.hf_config.config_import import ConfigImportError, parse_hf_config
from sparkdomain.planner import Architecture
from sparkdomain.planner.link import allreduces_per_layer
from sparkdomain.snapshot import (
    Snapshot,
    SnapshotError,
    hub_cache_dir,
    read_snapshot,
    with_quantization,
)
from sparksim.decode import StepReads, draft_reads, step_reads
from vllm_adapter.speculative import Speculation
from vllm_adapter.startup import ModelConfigError, params
from vllm_adapter.startup.model import TextModel, read_model

log = logging.getLogger("sparksim")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    snapshot: Snapshot
    config: dict  # config.json with the ModelOpt quantization folded in
    model: TextModel  # the start-up model's reading of it
    architecture: Architecture
    architecture_name: str

    @property
    def size_bytes(self) -> int | None:
        return self.snapshot.size_bytes

    def reads(
        self, args, spec: Speculation | None = None, environ: dict | None = None
    ) -> StepReads | None:
        """What a decode step of this checkpoint reads per Spark (sparksim/decode.py), with
        the weight format `--quantization` gives (fp8 quantizes a bf16 checkpoint online)
        and, with speculative decoding `spec`, what one drafter pass reads (a draft
        checkpoint it names is looked up in the same cache)."""
        if not self.size_bytes:
            return None
        fmt = self.architecture.weight_format or "bf16"
        size = float(self.size_bytes)
        if fmt in ("bf16", "fp16", "float16", "bfloat16"):
            fmt = format_from_size(size, (self.architecture.total_params_b or 0) * 1e9) or fmt
        online = str(getattr(args, "quantization", None) or "")
        if online == "fp8" and fmt in ("bf16", "fp16"):
            fmt, size = "fp8", size / 2
        tp = max(getattr(args, "tensor_parallel_size", 1) or 1, 1)
        # The MTP layers a config declares are taken to be in the checkpoint (bf16, as
        # ModelOpt's and the model makers' exports keep them) and not read without
        # speculative decoding.
        reads = step_reads(self.model, size, fmt, tp,
                           draft_in_checkpoint=bool(self.model.mtp_layers))  # fmt: skip
        if spec is None:
            return reads
        draft_size = drafter_size(spec, environ)
        draft = draft_reads(self.model, spec.family, spec.method, tp, draft_size,
                            head_bytes=reads.head_bytes)  # fmt: skip
        return dataclasses.replace(reads, draft=draft)


def find(model: str, revision: str | None = None, environ: dict | None = None) -> Checkpoint | None:
    """The checkpoint vLLM would load, when the cache holds its config.json; None
    otherwise (a path, a model never downloaded: the caller falls back to a profile)."""
    try:
        snap = read_snapshot(hub_cache_dir(environ), model, revision or "main")
    except (SnapshotError, OSError) as exc:
        log.warning("sparksim: %s's cached files cannot be read: %s", model, exc)
        return None
    if snap is None:
        return None
    config = with_quantization(snap.config, snap.quant_config)
    try:
        fields = parse_hf_config(snap.config, snap.quant_config).fields
        text = read_model(config)
    except (ConfigImportError, ModelConfigError, ValueError) as exc:
        log.warning("sparksim: %s's config.json cannot be read: %s", model, exc)
        return None
    known = {f.name for f in dataclasses.fields(Architecture)}
    values = {k: v for k, v in fields.items() if k in known and v is not None}
    total = params.total_params(text) + params.draft_params(text)
    values["total_params_b"] = total / 1e9
    if text.is_moe:
        values["active_params_b"] = params.active_params(text) / 1e9
    if snap.size_bytes:
        values["weight_gb"] = snap.size_bytes / 1e9
    values["tp_allreduces_per_layer"] = allreduces_per_layer(snap.config)
    arch = dataclasses.replace(Architecture(), **values)
    name = str((snap.config.get("architectures") or ["LlamaForCausalLM"])[0])
    return Checkpoint(snap, config, text, arch, name)


def drafter_size(spec: Speculation | None, environ: dict | None = None) -> float | None:
    """Bytes of a speculative drafter's own checkpoint in the cache (EAGLE, DFlash, a draft
    model; its size only — an EAGLE head's config is not a model served on its own); None
    for MTP, a lookup, or a drafter not cached."""
    snap = _drafter_snapshot(spec, environ)
    return float(snap.size_bytes) if snap is not None and snap.size_bytes else None


def drafter_config(spec: Speculation | None, environ: dict | None = None) -> dict | None:
    """The config.json of a speculative drafter in the cache (what vLLM reads of a draft
    model or DFlash drafter: its layers hold KV too); None when not cached."""
    snap = _drafter_snapshot(spec, environ)
    return dict(snap.config) if snap is not None and snap.config else None


def _drafter_snapshot(spec: Speculation | None, environ: dict | None) -> Snapshot | None:
    if spec is None or not spec.draft_model or spec.family in ("mtp", "lookup"):
        return None
    try:
        return read_snapshot(hub_cache_dir(environ), spec.draft_model, "main")
    except (SnapshotError, OSError):
        return None


def format_from_size(size_bytes: float, parameters: float) -> str | None:
    """A checkpoint whose config names no quantization but whose bytes per parameter say it
    is quantized (a config copied from the base model, an export that keeps the settings
    elsewhere): about half a byte is 4-bit weights, about one byte FP8/INT8."""
    if parameters <= 0:
        return None
    per_param = size_bytes / parameters
    if per_param < 0.75:
        return "int4"
    if per_param < 1.3:
        return "fp8"
    return None
