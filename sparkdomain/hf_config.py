"""Read a Hugging Face `config.json` (and ModelOpt's `hf_quant_config.json`) into recipe fields.

Pure Python, no Django: the wizard, the recipe form and the API all call
`parse_hf_config()` with the text a user pasted or uploaded. The planner needs the
architecture numbers that decide KV-cache and recurrent-state memory (SPEC §2), and
every model family spells them differently, so this module is the one place that knows
the spellings: dense transformers, sliding-window models (gpt-oss), Mamba2 hybrids
(Nemotron-H), Gated DeltaNet hybrids (Qwen3-Next / Qwen3.5), MLA (DeepSeek) and the
quantization configs of ModelOpt, MXFP4, FP8, AWQ, GPTQ and compressed-tensors.

It never guesses a number it cannot read: what is missing goes into `notes` as a
sentence for the user, and the field stays out of `fields` so the form keeps whatever
the user typed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sparkdomain.bounded import DocumentError, clip, load_json

MIB = 2**20
# vLLM keeps the SSM / linear-attention state in fp32 and the conv state in the model
# dtype (bf16 on every checkpoint we plan for).
SSM_STATE_BYTES = 4
CONV_STATE_BYTES = 2

NESTED_LANGUAGE_KEYS = ("text_config", "llm_config", "language_config")
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts")

FULL_ATTENTION_TYPES = frozenset({"full_attention", "attention", "global_attention"})
SLIDING_ATTENTION_TYPES = frozenset({"sliding_attention", "sliding_window_attention"})
LINEAR_ATTENTION_TYPES = frozenset({"linear_attention"})
MAMBA_TYPES = frozenset({"mamba", "mamba2"})
PURE_STATE_SPACE_MODEL_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba"})

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

# What an import says is bounded like what it reads (a config may hold anything).
MESSAGE_CHARS = 500
NOTES_SHOWN = 40

PARAMS_NOTE = (
    "Total parameters are not in config.json: enter them (or the weight size in GB) yourself."
)


class ConfigImportError(ValueError):
    """A config that cannot be read at all; the message is shown to the user as is."""


@dataclass
class HFConfigImport:
    """What a config.json says about a model, in recipe field names.

    `fields` holds only values the config determines; `notes` says in sentences what was
    inferred and what the user must still supply.
    """

    fields: dict[str, object] = field(default_factory=dict)
    max_position_embeddings: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Layers:
    num_layers: int
    attention: int
    sliding: int = 0
    window: int | None = None
    linear: int = 0
    mamba: int = 0


def parse_hf_config(
    config: str | bytes | Mapping[str, object],
    quant_config: str | bytes | Mapping[str, object] | None = None,
) -> HFConfigImport:
    """Turn config.json (plus an optional hf_quant_config.json) into recipe fields.

    Raises ConfigImportError when the text is not a JSON object or has no layer count,
    because without layers nothing the planner needs can be derived, and when it is larger,
    deeper or has bigger numbers than a config.json can (sparkdomain/bounded.py). Every
    message and note is cut to a readable length.
    """
    try:
        result = _parse(config, quant_config)
    except ConfigImportError as exc:
        raise ConfigImportError(clip(str(exc), MESSAGE_CHARS)) from None
    notes = [clip(note, MESSAGE_CHARS) for note in result.notes[:NOTES_SHOWN]]
    if len(result.notes) > NOTES_SHOWN:
        notes.append(f"… and {len(result.notes) - NOTES_SHOWN} more notes.")
    result.notes = notes
    return result


def _parse(
    config: str | bytes | Mapping[str, object],
    quant_config: str | bytes | Mapping[str, object] | None,
) -> HFConfigImport:
    root = _load_object(config, "config.json")
    hf_quant = _load_object(quant_config, "hf_quant_config.json") if quant_config else None

    result = HFConfigImport()
    notes = result.notes
    lm, nested_key = _language_model(root)
    if nested_key:
        notes.append(
            f"Read the language model from '{nested_key}' (a multimodal config); the vision "
            "or audio encoder is not described by these fields."
        )

    layers = _layer_plan(lm, notes)
    fields_ = result.fields
    fields_["num_layers"] = layers.num_layers
    fields_["attention_layers"] = layers.attention
    fields_["sliding_window_layers"] = layers.sliding
    if not layers.sliding:
        fields_["sliding_window"] = 0
    elif layers.window:
        fields_["sliding_window"] = layers.window
    else:
        notes.append(
            f"{layers.sliding} layers use sliding-window attention but config.json gives no "
            "sliding_window: enter the window size yourself."
        )

    mla = _int(lm, "kv_lora_rank")
    if mla:
        _mla_fields(lm, fields_, notes, mla)
    else:
        fields_["kv_lora_rank"] = 0
        fields_["qk_rope_head_dim"] = 0
        if layers.attention:
            _head_fields(lm, fields_, notes)

    state = _recurrent_state_mib(lm, layers, notes)
    if state is not None:
        fields_["recurrent_state_mib"] = state

    dtype = _torch_dtype(lm, root, notes)
    qc = _mapping(root.get("quantization_config")) or _mapping(lm.get("quantization_config"))
    fields_.update(_quantization(qc, hf_quant, dtype, notes))

    result.max_position_embeddings = _int(lm, "max_position_embeddings") or _int(lm, "n_positions")
    if result.max_position_embeddings is None:
        result.max_position_embeddings = _int(root, "max_position_embeddings")

    notes.append(PARAMS_NOTE)
    _moe_note(lm, notes)
    return result


# --- reading the document ----------------------------------------------------------------


def _load_object(source: str | bytes | Mapping[str, object], name: str) -> dict[str, object]:
    """Parse text or bytes as JSON and insist on an object, naming the file in errors."""
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, str | bytes | bytearray):
        raise ConfigImportError(f"{name} must be JSON text, got {type(source).__name__}.")
    try:
        # Bytes too: load_json checks the size before decoding (UTF-8, a BOM allowed).
        parsed = load_json(source, what=name)
    except DocumentError as exc:
        raise ConfigImportError(str(exc)) from None
    if not isinstance(parsed, dict):
        raise ConfigImportError(
            f"{name} must be a JSON object ({{...}}), but it is a {_json_kind(parsed)}."
        )
    return parsed


def _json_kind(value: object) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def _language_model(root: dict[str, object]) -> tuple[dict[str, object], str]:
    """Multimodal configs nest the text model; its layers are the ones that keep KV."""
    for key in NESTED_LANGUAGE_KEYS:
        nested = root.get(key)
        if isinstance(nested, dict) and (_has_layer_count(nested) or not _has_layer_count(root)):
            return nested, key
    return root, ""


def _has_layer_count(cfg: Mapping[str, object]) -> bool:
    return any(cfg.get(key) is not None for key in LAYER_COUNT_KEYS) or isinstance(
        cfg.get("hybrid_override_pattern"), str
    )


def _mapping(value: object) -> dict[str, object] | None:
    return value if isinstance(value, dict) else None


def _int(cfg: Mapping[str, object], key: str) -> int | None:
    """A whole number or None when absent/null; anything else is a broken config."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigImportError(
            f"'{key}' in config.json must be a whole number of at least 0, got {clip(value)}."
        )
    return value


def _first_int(cfg: Mapping[str, object], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = _int(cfg, key)
        if value is not None:
            return value
    return None


# --- layers --------------------------------------------------------------------------------


def _layer_plan(cfg: dict[str, object], notes: list[str]) -> _Layers:
    """Work out which layers keep a KV cache; only those cost memory per token."""
    declared = _first_int(cfg, LAYER_COUNT_KEYS)
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return _hybrid_pattern_layers(pattern, declared, notes)
    if declared is None:
        raise ConfigImportError(
            "config.json has no layer count: expected 'num_hidden_layers' "
            "(or 'n_layer' / 'num_layers')."
        )
    if declared == 0:
        raise ConfigImportError("config.json says 'num_hidden_layers' is 0.")

    if str(cfg.get("model_type", "")).lower() in PURE_STATE_SPACE_MODEL_TYPES:
        notes.append(
            "A pure state-space model keeps no KV cache; its recurrent state per sequence "
            "could not be computed from this config: enter it yourself."
        )
        return _Layers(num_layers=declared, attention=0)

    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return _layer_types_layers(cfg, layer_types, declared, notes)

    interval = _int(cfg, "full_attention_interval")
    if interval:
        attention = declared // interval
        notes.append(
            f"One layer in every {interval} is full attention ({attention} of {declared}); "
            f"the other {declared - attention} are linear attention with a fixed state."
        )
        return _Layers(num_layers=declared, attention=attention, linear=declared - attention)

    window = _int(cfg, "sliding_window")
    pattern_every = _int(cfg, "sliding_window_pattern")
    if window and pattern_every:
        # Gemma 2/3 before layer_types: every Nth layer is global, the rest slide.
        full = declared // pattern_every
        notes.append(
            f"One layer in every {pattern_every} is full attention ({full} of {declared}); the "
            f"other {declared - full} use a {window}-token sliding window."
        )
        return _Layers(
            num_layers=declared, attention=declared, sliding=declared - full, window=window
        )
    if window:
        if cfg.get("use_sliding_window") is True:
            notes.append(
                f"use_sliding_window is on: counted all {declared} layers as sliding-window "
                f"({window} tokens); max_window_layers, if set, is not taken into account."
            )
            return _Layers(num_layers=declared, attention=declared, sliding=declared, window=window)
        notes.append(
            f"config.json sets sliding_window ({window}) without use_sliding_window or "
            "layer_types: counted every layer as full attention, the larger and safer KV "
            "estimate."
        )
    return _Layers(num_layers=declared, attention=declared)


def _hybrid_pattern_layers(pattern: str, declared: int | None, notes: list[str]) -> _Layers:
    """Nemotron-H: one character per layer, '*' attention, 'M' Mamba2, 'E' MoE, '-' MLP."""
    unknown = sorted(set(pattern) - set("*ME-"))
    if unknown:
        raise ConfigImportError(
            "hybrid_override_pattern may contain only '*', 'M', 'E' and '-', found "
            + ", ".join(repr(ch) for ch in unknown)
            + "."
        )
    num_layers = len(pattern)
    if declared is not None and declared != num_layers:
        notes.append(
            f"num_hidden_layers ({declared}) differs from the length of "
            f"hybrid_override_pattern ({num_layers}); used the pattern."
        )
    attention = pattern.count("*")
    mamba = pattern.count("M")
    notes.append(
        f"Hybrid layer pattern: {attention} attention, {mamba} Mamba2, "
        f"{pattern.count('E')} MoE and {pattern.count('-')} MLP layers; only the "
        f"{attention} attention layers keep a KV cache."
    )
    return _Layers(num_layers=num_layers, attention=attention, mamba=mamba)


def _layer_types_layers(
    cfg: dict[str, object], layer_types: list[object], declared: int, notes: list[str]
) -> _Layers:
    names = [str(kind).lower() for kind in layer_types]
    full = sum(name in FULL_ATTENTION_TYPES for name in names)
    sliding = sum(name in SLIDING_ATTENTION_TYPES for name in names)
    linear = sum(name in LINEAR_ATTENTION_TYPES for name in names)
    mamba = sum(name in MAMBA_TYPES for name in names)
    known = FULL_ATTENTION_TYPES | SLIDING_ATTENTION_TYPES | LINEAR_ATTENTION_TYPES | MAMBA_TYPES
    unknown = sorted({name for name in names if name not in known})
    if unknown:
        notes.append(
            "layer_types has kinds this importer does not know ("
            + ", ".join(unknown)
            + "); they were not counted as attention layers: check attention_layers."
        )
    if len(names) != declared:
        notes.append(
            f"layer_types lists {len(names)} layers but the config says {declared}; "
            "the counts come from layer_types."
        )
    window = _int(cfg, "sliding_window") if sliding else None
    parts = [f"{full} full-attention"]
    if sliding:
        parts.append(f"{sliding} sliding-window ({window or 'unknown'} tokens)")
    if linear:
        parts.append(f"{linear} linear-attention")
    if mamba:
        parts.append(f"{mamba} Mamba")
    notes.append("layer_types: " + ", ".join(parts) + " layers.")
    return _Layers(
        num_layers=declared,
        attention=full + sliding,
        sliding=sliding,
        window=window,
        linear=linear,
        mamba=mamba,
    )


# --- attention heads -----------------------------------------------------------------------


def _head_fields(cfg: dict[str, object], fields_: dict[str, object], notes: list[str]) -> None:
    attention_heads = _int(cfg, "num_attention_heads") or _int(cfg, "n_head")
    kv_heads = _int(cfg, "num_key_value_heads") or _int(cfg, "num_kv_heads")
    if kv_heads:
        fields_["kv_heads"] = kv_heads
    elif attention_heads:
        fields_["kv_heads"] = attention_heads
        notes.append(
            f"No GQA: KV heads = attention heads ({attention_heads}), because config.json "
            "has no num_key_value_heads."
        )
    else:
        notes.append("config.json gives no attention head counts: enter the KV heads yourself.")

    # Nemotron-H names it attention_head_dim; hidden / heads is wrong for such models.
    head_dim = _int(cfg, "head_dim") or _int(cfg, "attention_head_dim")
    hidden = _int(cfg, "hidden_size") or _int(cfg, "n_embd")
    if head_dim:
        fields_["head_dim"] = head_dim
    elif hidden and attention_heads:
        fields_["head_dim"] = hidden // attention_heads
        notes.append(
            f"head_dim derived as hidden_size / num_attention_heads = {hidden} / "
            f"{attention_heads} = {hidden // attention_heads}."
        )
        if hidden % attention_heads:
            notes.append("hidden_size is not a multiple of the head count: check head_dim.")
    else:
        notes.append("config.json gives no head_dim (nor hidden_size): enter it yourself.")


def _mla_fields(
    cfg: dict[str, object], fields_: dict[str, object], notes: list[str], kv_lora_rank: int
) -> None:
    """DeepSeek-style MLA caches one latent per token per layer, not per-head K and V."""
    fields_["kv_lora_rank"] = kv_lora_rank
    rope = _int(cfg, "qk_rope_head_dim")
    if rope is None:
        notes.append("MLA config without qk_rope_head_dim: enter it yourself.")
    else:
        fields_["qk_rope_head_dim"] = rope
    kv_heads = _int(cfg, "num_key_value_heads")
    if kv_heads:
        fields_["kv_heads"] = kv_heads
    head_dim = _int(cfg, "head_dim")
    if head_dim:
        fields_["head_dim"] = head_dim
    notes.append(
        f"MLA attention: the KV cache holds kv_lora_rank + qk_rope_head_dim = "
        f"{kv_lora_rank} + {rope if rope is not None else '?'} elements per token per layer; "
        "KV heads and head_dim do not enter it."
    )


# --- recurrent state -----------------------------------------------------------------------


def _recurrent_state_mib(cfg: dict[str, object], layers: _Layers, notes: list[str]) -> float | None:
    """Per-sequence state of Mamba2 and Gated DeltaNet layers, fixed regardless of context."""
    total = 0
    missing = False
    if layers.mamba:
        mamba = _mamba2_state_bytes(cfg, layers.mamba)
        if mamba is None:
            missing = True
            notes.append(
                f"{layers.mamba} Mamba layers, but the Mamba2 sizes (mamba_num_heads, "
                "mamba_head_dim, ssm_state_size, n_groups, conv_kernel) are incomplete: "
                "enter the recurrent state per sequence yourself."
            )
        else:
            total += mamba
    if layers.linear:
        linear = _gated_deltanet_state_bytes(cfg, layers.linear)
        if linear is None:
            missing = True
            notes.append(
                f"{layers.linear} linear-attention layers, but their sizes "
                "(linear_num_value_heads, linear_num_key_heads, linear_key_head_dim, "
                "linear_value_head_dim, linear_conv_kernel_dim) are incomplete: enter the "
                "recurrent state per sequence yourself."
            )
        else:
            total += linear
    if missing:
        return None
    if total:
        mib = round(total / MIB, 2)
        notes.append(
            f"Recurrent state per running sequence ≈ {mib} MiB (fp32 SSM state + bf16 conv "
            "state), whatever the context length."
        )
        return mib
    return 0.0


def _mamba2_state_bytes(cfg: dict[str, object], mamba_layers: int) -> int | None:
    heads = _first_int(cfg, ("mamba_num_heads", "n_mamba_heads", "mamba_n_heads"))
    head_dim = _first_int(cfg, ("mamba_head_dim", "mamba_headdim", "mamba_d_head"))
    state = _first_int(cfg, ("ssm_state_size", "mamba_d_state"))
    groups = _first_int(cfg, ("n_groups", "mamba_n_groups"))
    kernel = _first_int(cfg, ("conv_kernel", "mamba_d_conv"))
    if not (heads and head_dim and state and groups and kernel):
        return None
    ssm = mamba_layers * heads * head_dim * state * SSM_STATE_BYTES
    conv_channels = heads * head_dim + 2 * groups * state
    conv = mamba_layers * (kernel - 1) * conv_channels * CONV_STATE_BYTES
    return ssm + conv


def _gated_deltanet_state_bytes(cfg: dict[str, object], linear_layers: int) -> int | None:
    value_heads = _int(cfg, "linear_num_value_heads")
    key_heads = _int(cfg, "linear_num_key_heads")
    key_dim = _int(cfg, "linear_key_head_dim")
    value_dim = _int(cfg, "linear_value_head_dim")
    kernel = _int(cfg, "linear_conv_kernel_dim")
    if not (value_heads and key_heads and key_dim and value_dim and kernel):
        return None
    ssm = linear_layers * value_heads * key_dim * value_dim * SSM_STATE_BYTES
    conv_channels = 2 * key_heads * key_dim + value_heads * value_dim
    conv = linear_layers * (kernel - 1) * conv_channels * CONV_STATE_BYTES
    return ssm + conv


# --- weight format and quantization --------------------------------------------------------


def _torch_dtype(lm: dict[str, object], root: dict[str, object], notes: list[str]) -> str:
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


def _quantization(
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
        q = _mapping(hf_quant.get("quantization"))
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
        bits = _int(qc, "bits") or _int(qc, "w_bit") or 4
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
        layers = _mapping(q.get("quantized_layers")) or {}
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
    groups = _mapping(qc.get("config_groups")) or {}
    formats = set()
    for group in groups.values():
        weights = _mapping(group.get("weights")) if isinstance(group, dict) else None
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


# --- mixture of experts --------------------------------------------------------------------


def _moe_note(cfg: dict[str, object], notes: list[str]) -> None:
    experts = _first_int(cfg, EXPERT_COUNT_KEYS)
    if not experts or experts < 2:
        return
    per_token = _first_int(cfg, EXPERTS_PER_TOKEN_KEYS)
    shared = _first_int(cfg, SHARED_EXPERT_KEYS)
    text = f"Mixture of experts: {experts} routed experts"
    if per_token:
        text += f", {per_token} used per token"
    if shared:
        text += f", plus {shared} shared"
    notes.append(
        text + ". Active parameters are not in config.json either: enter them too (they set "
        "the decode speed estimate)."
    )
