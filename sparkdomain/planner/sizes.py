"""Bytes per model: weights (all of them, and what one decode step reads) and KV cache per
token and per sequence, by attention kind (standard, sliding-window, MLA). sparksim uses
these same formulas."""

from __future__ import annotations

import re

from sparkdomain.planner.inputs import Architecture
from sparkdomain.spark import GB

# Bytes per parameter by weight format. NVFP4 is 4-bit values plus one fp8 scale per 16
# (4.5 bits); MXFP4 and group-128 int4 (AWQ/GPTQ) carry 8 or 16 bits of scale per 32 or
# 128 values (4.25 bits). Seed 001's "bytes/param" figures are slips for bits.
BYTES_PER_PARAM: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "nvfp4": 4.5 / 8,
    "mxfp4": 4.25 / 8,
    "int4": 4.25 / 8,
}
KV_ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def bytes_per_param(weight_format: str) -> float:
    try:
        return BYTES_PER_PARAM[weight_format]
    except KeyError:
        raise ValueError(
            f"unknown weight format {weight_format!r}: expected one of "
            + ", ".join(sorted(BYTES_PER_PARAM))
        ) from None


def weight_bytes(arch: Architecture) -> float | None:
    if arch.weight_gb is not None:
        return arch.weight_gb * GB
    if arch.total_params_b is None:
        return None
    return arch.total_params_b * 1e9 * bytes_per_param(arch.weight_format)


def active_weight_bytes(arch: Architecture) -> float | None:
    """Bytes one decode step reads for one token: the active parameters, once."""
    if arch.active_params_b is not None:
        return arch.active_params_b * 1e9 * bytes_per_param(arch.weight_format)
    # A dense model reads all its weights every step.
    return weight_bytes(arch)


# vLLM's KV-cache dtypes by the bits they store per element (vllm/config/cache.py's
# CacheDType: the quantized ones name their width — k8v4 keeps keys in 8 bits and values in
# 4, nvfp4 is 4-bit values plus an fp8 scale per 16 like the weights).
_KV_NAMED = {"float16": 2, "bfloat16": 2, "fp16": 2, "bf16": 2, "float32": 4, "fp32": 4}
_KV_KV_BITS = re.compile(r"k(\d)v(\d)")
_KV_BITS = re.compile(r"(\d)bit")


def kv_cache_element_bytes(kv_cache_dtype: str) -> float | None:
    """Bytes per cached element of an explicit KV-cache dtype; None for "auto" (the
    checkpoint decides) or a name no rule knows."""
    name = kv_cache_dtype.lower()
    if name in _KV_NAMED:
        return float(_KV_NAMED[name])
    if name.startswith(("fp8", "int8")):
        return 1.0
    if name.startswith("nvfp4"):
        return 4.5 / 8
    found = _KV_KV_BITS.search(name)
    if found:
        return (int(found.group(1)) + int(found.group(2))) / 16
    found = _KV_BITS.search(name)
    if found or name.startswith("int4"):
        return (int(found.group(1)) if found else 4) / 8
    return None


def kv_element_bytes(arch: Architecture, kv_cache_dtype: str) -> float:
    explicit = kv_cache_element_bytes(kv_cache_dtype)
    if explicit is not None:
        return explicit
    # "auto": the checkpoint's KV dtype if it declares one, else the model's dtype
    # (quantized weights still compute and cache in bf16).
    if arch.checkpoint_kv_dtype in KV_ELEMENT_BYTES:
        return KV_ELEMENT_BYTES[arch.checkpoint_kv_dtype]
    return KV_ELEMENT_BYTES.get(arch.weight_format, 2)


def _kv_layers(arch: Architecture) -> tuple[int, int] | None:
    """(full-attention layers, sliding-window layers), or None if unknown."""
    layers = arch.attention_layers if arch.attention_layers is not None else arch.num_layers
    if layers is None:
        return None
    # Sliding layers only cap their KV when a window is known.
    sliding = min(arch.sliding_window_layers or 0, layers) if arch.sliding_window else 0
    return layers - sliding, sliding


def kv_bytes_per_token_split(arch: Architecture, element_bytes: int) -> tuple[float, float] | None:
    """KV bytes one token adds: (in full-attention layers, in sliding-window layers).

    Standard attention: 2 (K and V) × layers × kv_heads × head_dim × bytes.
    MLA: layers × (kv_lora_rank + qk_rope_head_dim) × bytes (one latent, no K/V pair).
    """
    layers = _kv_layers(arch)
    if layers is None:
        return None
    full, sliding = layers
    if arch.is_mla:
        per_layer = (arch.kv_lora_rank + arch.qk_rope_head_dim) * element_bytes
    elif arch.kv_heads is not None and arch.head_dim is not None:
        per_layer = 2 * arch.kv_heads * arch.head_dim * element_bytes
    else:
        return None
    return float(full * per_layer), float(sliding * per_layer)


def kv_bytes_per_sequence(
    arch: Architecture, element_bytes: float, context: int | None
) -> float | None:
    split = kv_bytes_per_token_split(arch, element_bytes)
    if split is None or context is None:
        return None
    full, sliding = split
    window = arch.sliding_window or context
    return full * context + sliding * min(context, window)
