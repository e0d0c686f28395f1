"""The weight format and quantization: the checkpoint's torch_dtype, and the quantization
configs of ModelOpt (config.json or hf_quant_config.json), MXFP4, FP8, AWQ, GPTQ and
compressed-tensors, with the checkpoint's KV dtype and the mixed-precision note."""

from __future__ import annotations

from collections.abc import Mapping

from sparkdomain.hf_config.document import as_mapping, whole_number

TORCH_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}
# Weight formats that store most weights in 4 bits: an exclusion list in their quant
# config means a real share of the checkpoint is wider, so params × bytes undershoots.
LOW_BIT_FORMATS = frozenset({"nvfp4", "mxfp4", "int4"})


# --- weight format and quantization --------------------------------------------------------


def torch_dtype(lm: dict[str, object], root: dict[str, object], notes: list[str]) -> str:
    """The checkpoint's native dtype: what unquantized weights and the KV cache use."""
    for cfg in (lm, root):
        for key in ("torch_dtype", "dtype"):
            raw = cfg.get(key)
            if isinstance(raw, str) and raw:
                dtype = TORCH_DTYPES.get(raw.lower().removeprefix("torch."))
                if dtype:
                    return dtype
                notes.append(f"Unknown {key} '{raw}': set the weight format yourself.")
                return ""
    notes.append("config.json has no torch_dtype: set the weight format yourself.")
    return ""


def _native_kv(dtype: str, notes: list[str]) -> str:
    if dtype == "fp32":
        # vLLM's dtype=auto downcasts float32 checkpoints, so the cache is 16-bit.
        notes.append(
            "The checkpoint is float32; vLLM serves it in bf16 by default, so the weight "
            "estimate here is on the high side."
        )
        return "bf16"
    return dtype


def quantization_fields(
    qc: dict[str, object] | None,
    hf_quant: dict[str, object] | None,
    dtype: str,
    notes: list[str],
) -> dict[str, object]:
    """weight_format, quantization and checkpoint_kv_dtype from whichever configs exist.

    hf_quant_config.json is applied last: ModelOpt writes it as the source of truth and
    older exports have no quantization_config in config.json at all.
    """
    out: dict[str, object] = {}
    kv = ""
    excluded: list[str] = []
    mixed = False
    if qc is not None:
        kv, excluded, mixed = _apply_quantization_config(qc, out, notes)
    if hf_quant is not None:
        q = as_mapping(hf_quant.get("quantization"))
        if q is None:
            notes.append("hf_quant_config.json has no 'quantization' object; it was ignored.")
        else:
            algo_kv, algo_mixed = _apply_modelopt_algo(q, out, notes)
            kv = algo_kv or kv
            excluded = _string_list(q.get("exclude_modules")) or excluded
            mixed = mixed or algo_mixed
    if "weight_format" not in out and dtype and qc is None and hf_quant is None:
        out["weight_format"] = dtype
        out["quantization"] = ""
    kv = kv or _native_kv(dtype, notes)
    if kv:
        out["checkpoint_kv_dtype"] = kv
    if mixed or (out.get("weight_format") in LOW_BIT_FORMATS and excluded):
        shown = ", ".join(excluded[:3]) + (", ..." if len(excluded) > 3 else "")
        notes.append(
            "Weights are mixed precision"
            + (f" (kept at higher precision: {shown})" if shown else "")
            + ": parameters × bytes per parameter underestimates them; the actual size in "
            "GB (weight_gb) is the better input."
        )
    return out


def _apply_quantization_config(
    qc: dict[str, object], out: dict[str, object], notes: list[str]
) -> tuple[str, list[str], bool]:
    method = str(qc.get("quant_method", "")).lower()
    excluded = (
        _string_list(qc.get("ignore"))
        or _string_list(qc.get("exclude_modules"))
        or _string_list(qc.get("modules_to_not_convert"))
    )
    kv = _kv_from_scheme(qc.get("kv_cache_scheme"))
    mixed = False
    if method == "modelopt":
        algo_kv, mixed = _apply_modelopt_algo(qc, out, notes)
        kv = algo_kv or kv
    elif method == "mxfp4":
        out.update(weight_format="mxfp4", quantization="mxfp4")
    elif method == "fp8":
        out.update(weight_format="fp8", quantization="fp8")
    elif method in ("awq", "gptq"):
        bits = whole_number(qc, "bits") or whole_number(qc, "w_bit") or 4
        if bits in (4, 8):
            out["weight_format"] = "int4" if bits == 4 else "int8"
        else:
            notes.append(f"{method.upper()} with {bits}-bit weights: set the weight format.")
        out["quantization"] = method
    elif method == "compressed-tensors":
        out["quantization"] = "compressed-tensors"
        weight_format, mixed = _compressed_tensors_format(qc)
        if weight_format:
            out["weight_format"] = weight_format
        else:
            notes.append(
                "compressed-tensors checkpoint with a weight scheme this importer does not "
                "recognise: set the weight format yourself."
            )
    else:
        notes.append(
            f"quantization_config uses quant_method '{method or '?'}', which this importer "
            "does not recognise: set the weight format and --quantization yourself."
        )
    return kv, excluded, mixed


def _apply_modelopt_algo(
    q: Mapping[str, object], out: dict[str, object], notes: list[str]
) -> tuple[str, bool]:
    """ModelOpt's quant_algo / kv_cache_quant_algo, shared by both files' layouts."""
    algo = str(q.get("quant_algo") or "").upper()
    mixed = False
    if algo == "MIXED_PRECISION":
        mixed = True
        layers = as_mapping(q.get("quantized_layers")) or {}
        algos = {
            str(layer.get("quant_algo", "")).upper()
            for layer in layers.values()
            if isinstance(layer, dict)
        }
        algo = "NVFP4" if any("NVFP4" in a for a in algos) else next(iter(algos), "")
    if "NVFP4" in algo:
        out.update(weight_format="nvfp4", quantization="nvfp4")
    elif algo.startswith("FP8"):
        out.update(weight_format="fp8", quantization="fp8")
    elif "AWQ" in algo or algo.startswith("W4A"):
        out["weight_format"] = "int4"
        notes.append(f"ModelOpt {algo} checkpoint: 4-bit weights; choose --quantization yourself.")
    elif algo:
        notes.append(f"ModelOpt quant_algo '{algo}' is not recognised: set the weight format.")
    kv_algo = str(q.get("kv_cache_quant_algo") or "").upper()
    kv = ""
    if kv_algo.startswith("FP8"):
        kv = "fp8"
    elif kv_algo:
        notes.append(f"KV cache quant algo '{kv_algo}' is not recognised: check the KV dtype.")
    return kv, mixed


def _compressed_tensors_format(qc: dict[str, object]) -> tuple[str, bool]:
    fmt = str(qc.get("format", "")).lower()
    if "nvfp4" in fmt:
        return "nvfp4", False
    if "mxfp4" in fmt:
        return "mxfp4", False
    groups = as_mapping(qc.get("config_groups")) or {}
    formats = set()
    for group in groups.values():
        weights = as_mapping(group.get("weights")) if isinstance(group, dict) else None
        if weights is None:
            continue
        bits, kind = weights.get("num_bits"), str(weights.get("type", "")).lower()
        formats.add(
            {(8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4"}.get((bits, kind))
            or ("nvfp4" if (bits, kind) == (4, "float") else "")
        )
    if len(formats) == 1:
        return formats.pop(), False
    # Several schemes: report the narrowest and let the mixed-precision note explain.
    for candidate in ("nvfp4", "mxfp4", "int4", "fp8", "int8"):
        if candidate in formats:
            return candidate, True
    return "", False


def _kv_from_scheme(scheme: object) -> str:
    is_fp8 = (
        isinstance(scheme, dict)
        and scheme.get("num_bits") == 8
        and str(scheme.get("type", "float")).lower() == "float"
    )
    return "fp8" if is_fp8 else ""


def _string_list(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []
