"""The architecture numbers the planner needs, per model family: which layers keep a KV
cache (dense, sliding-window, Nemotron-H's hybrid pattern, layer_types, linear attention),
the attention heads or MLA latent, the recurrent state of Mamba2 and Gated DeltaNet layers,
and the mixture-of-experts note."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdomain.hf_config.document import (
    LAYER_COUNT_KEYS,
    ConfigImportError,
    first_whole_number,
    whole_number,
)

MIB = 2**20
# vLLM keeps the SSM / linear-attention state in fp32 and the conv state in the model
# dtype (bf16 on every checkpoint we plan for).
SSM_STATE_BYTES = 4
CONV_STATE_BYTES = 2

EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk")
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts")

FULL_ATTENTION_TYPES = frozenset({"full_attention", "attention", "global_attention"})
SLIDING_ATTENTION_TYPES = frozenset({"sliding_attention", "sliding_window_attention"})
LINEAR_ATTENTION_TYPES = frozenset({"linear_attention"})
MAMBA_TYPES = frozenset({"mamba", "mamba2"})
PURE_STATE_SPACE_MODEL_TYPES = frozenset({"mamba", "mamba2", "falcon_mamba"})


@dataclass
class Layers:
    num_layers: int
    attention: int
    sliding: int = 0
    window: int | None = None
    linear: int = 0
    mamba: int = 0


# --- layers --------------------------------------------------------------------------------


def layer_plan(cfg: dict[str, object], notes: list[str]) -> Layers:
    """Work out which layers keep a KV cache; only those cost memory per token."""
    declared = first_whole_number(cfg, LAYER_COUNT_KEYS)
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
        return Layers(num_layers=declared, attention=0)

    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return _layer_types_layers(cfg, layer_types, declared, notes)

    interval = whole_number(cfg, "full_attention_interval")
    if interval:
        attention = declared // interval
        notes.append(
            f"One layer in every {interval} is full attention ({attention} of {declared}); "
            f"the other {declared - attention} are linear attention with a fixed state."
        )
        return Layers(num_layers=declared, attention=attention, linear=declared - attention)

    window = whole_number(cfg, "sliding_window")
    pattern_every = whole_number(cfg, "sliding_window_pattern")
    if window and pattern_every:
        # Gemma 2/3 before layer_types: every Nth layer is global, the rest slide.
        full = declared // pattern_every
        notes.append(
            f"One layer in every {pattern_every} is full attention ({full} of {declared}); the "
            f"other {declared - full} use a {window}-token sliding window."
        )
        return Layers(
            num_layers=declared, attention=declared, sliding=declared - full, window=window
        )
    if window:
        if cfg.get("use_sliding_window") is True:
            notes.append(
                f"use_sliding_window is on: counted all {declared} layers as sliding-window "
                f"({window} tokens); max_window_layers, if set, is not taken into account."
            )
            return Layers(num_layers=declared, attention=declared, sliding=declared, window=window)
        notes.append(
            f"config.json sets sliding_window ({window}) without use_sliding_window or "
            "layer_types: counted every layer as full attention, the larger and safer KV "
            "estimate."
        )
    return Layers(num_layers=declared, attention=declared)


def _hybrid_pattern_layers(pattern: str, declared: int | None, notes: list[str]) -> Layers:
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
    return Layers(num_layers=num_layers, attention=attention, mamba=mamba)


def _layer_types_layers(
    cfg: dict[str, object], layer_types: list[object], declared: int, notes: list[str]
) -> Layers:
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
    window = whole_number(cfg, "sliding_window") if sliding else None
    parts = [f"{full} full-attention"]
    if sliding:
        parts.append(f"{sliding} sliding-window ({window or 'unknown'} tokens)")
    if linear:
        parts.append(f"{linear} linear-attention")
    if mamba:
        parts.append(f"{mamba} Mamba")
    notes.append("layer_types: " + ", ".join(parts) + " layers.")
    return Layers(
        num_layers=declared,
        attention=full + sliding,
        sliding=sliding,
        window=window,
        linear=linear,
        mamba=mamba,
    )


# --- attention heads -----------------------------------------------------------------------


def head_fields(cfg: dict[str, object], fields_: dict[str, object], notes: list[str]) -> None:
    attention_heads = whole_number(cfg, "num_attention_heads") or whole_number(cfg, "n_head")
    kv_heads = whole_number(cfg, "num_key_value_heads") or whole_number(cfg, "num_kv_heads")
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
    head_dim = whole_number(cfg, "head_dim") or whole_number(cfg, "attention_head_dim")
    hidden = whole_number(cfg, "hidden_size") or whole_number(cfg, "n_embd")
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


def mla_fields(
    cfg: dict[str, object], fields_: dict[str, object], notes: list[str], kv_lora_rank: int
) -> None:
    """DeepSeek-style MLA caches one latent per token per layer, not per-head K and V."""
    fields_["kv_lora_rank"] = kv_lora_rank
    rope = whole_number(cfg, "qk_rope_head_dim")
    if rope is None:
        notes.append("MLA config without qk_rope_head_dim: enter it yourself.")
    else:
        fields_["qk_rope_head_dim"] = rope
    kv_heads = whole_number(cfg, "num_key_value_heads")
    if kv_heads:
        fields_["kv_heads"] = kv_heads
    head_dim = whole_number(cfg, "head_dim")
    if head_dim:
        fields_["head_dim"] = head_dim
    notes.append(
        f"MLA attention: the KV cache holds kv_lora_rank + qk_rope_head_dim = "
        f"{kv_lora_rank} + {rope if rope is not None else '?'} elements per token per layer; "
        "KV heads and head_dim do not enter it."
    )


# --- recurrent state -----------------------------------------------------------------------


def recurrent_state_mib(cfg: dict[str, object], layers: Layers, notes: list[str]) -> float | None:
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
    heads = first_whole_number(cfg, ("mamba_num_heads", "n_mamba_heads", "mamba_n_heads"))
    head_dim = first_whole_number(cfg, ("mamba_head_dim", "mamba_headdim", "mamba_d_head"))
    state = first_whole_number(cfg, ("ssm_state_size", "mamba_d_state"))
    groups = first_whole_number(cfg, ("n_groups", "mamba_n_groups"))
    kernel = first_whole_number(cfg, ("conv_kernel", "mamba_d_conv"))
    if not (heads and head_dim and state and groups and kernel):
        return None
    ssm = mamba_layers * heads * head_dim * state * SSM_STATE_BYTES
    conv_channels = heads * head_dim + 2 * groups * state
    conv = mamba_layers * (kernel - 1) * conv_channels * CONV_STATE_BYTES
    return ssm + conv


def _gated_deltanet_state_bytes(cfg: dict[str, object], linear_layers: int) -> int | None:
    value_heads = whole_number(cfg, "linear_num_value_heads")
    key_heads = whole_number(cfg, "linear_num_key_heads")
    key_dim = whole_number(cfg, "linear_key_head_dim")
    value_dim = whole_number(cfg, "linear_value_head_dim")
    kernel = whole_number(cfg, "linear_conv_kernel_dim")
    if not (value_heads and key_heads and key_dim and value_dim and kernel):
        return None
    ssm = linear_layers * value_heads * key_dim * value_dim * SSM_STATE_BYTES
    conv_channels = 2 * key_heads * key_dim + value_heads * value_dim
    conv = linear_layers * (kernel - 1) * conv_channels * CONV_STATE_BYTES
    return ssm + conv


# --- mixture of experts --------------------------------------------------------------------


def moe_note(cfg: dict[str, object], notes: list[str]) -> None:
    experts = first_whole_number(cfg, EXPERT_COUNT_KEYS)
    if not experts or experts < 2:
        return
    per_token = first_whole_number(cfg, EXPERTS_PER_TOKEN_KEYS)
    shared = first_whole_number(cfg, SHARED_EXPERT_KEYS)
    text = f"Mixture of experts: {experts} routed experts"
    if per_token:
        text += f", {per_token} used per token"
    if shared:
        text += f", plus {shared} shared"
    notes.append(
        text + ". Active parameters are not in config.json either: enter them too (they set "
        "the decode speed estimate)."
    )
