"""The language model as vLLM's KV cache sees it, read from its config.json: one entry per
layer that keeps state (full or sliding attention, MLA, a Mamba2 / gated-delta-net state),
the draft (MTP) layers, and the sizes the activation estimate needs. Pure Python.

Where vLLM decides a layer's kind: the model classes' `layer_types` / `hybrid_override_pattern`
/ `full_attention_interval` (Qwen3-Next, Qwen3.5: `model_executor/models/qwen3_next.py`,
`qwen3_5.py`; NemotronH: `nemotron_h.py`; Gemma: `layer_types` with `sliding_window`), and
the state shapes of `model_executor/layers/mamba/mamba_utils.py` (vLLM 0.33; the same shapes
since 0.13 for these families).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
    "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "int8": 1,
}  # fmt: skip

FULL, SLIDING, MLA, MAMBA2, GDN = "full", "sliding", "mla", "mamba2", "gdn"


class ModelConfigError(ValueError):
    """A config.json the predictor cannot read (what is missing, in words)."""


@dataclass(frozen=True)
class Layer:
    kind: str  # FULL, SLIDING, MLA, MAMBA2, GDN
    kv_heads: int = 0
    head_dim: int = 0  # K's
    head_dim_v: int = 0  # V's (0 for MLA)
    window: int = 0  # SLIDING
    draft: bool = False  # an MTP layer (merged into the target's buckets)


@dataclass(frozen=True)
class StateShapes:
    """One Mamba2 or gated-delta-net layer's state, per rank (elements): the conv state's
    rows and width (rows widen with speculative tokens), the temporal state."""

    conv_rows: int  # conv_kernel - 1 (+ num_speculative_tokens)
    conv_width: int
    temporal: int


@dataclass(frozen=True)
class TextModel:
    architecture: str
    model_type: str
    dtype: str  # torch dtype of the weights / activations
    hidden_size: int
    vocab_size: int
    num_layers: int
    layers: tuple[Layer, ...]
    intermediate_size: int = 0
    moe_intermediate_size: int = 0
    moe_latent_size: int = 0  # Nemotron 3 Super: the experts work in this width, not hidden
    moe_shared_intermediate_size: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    max_position_embeddings: int = 0
    mtp_layers: int = 0  # draft layers in the checkpoint (num_nextn_predict_layers …)
    config_ssm_dtype: str = ""  # Qwen3.5's mamba_ssm_dtype
    mamba: dict = field(default_factory=dict)  # Mamba2 sizes (heads, head_dim, groups, state)
    gdn: dict = field(default_factory=dict)  # gated-delta-net sizes
    is_multimodal: bool = False
    quantization: dict = field(default_factory=dict)
    gated_mlp: bool = True  # gate + up + down (relu2 MLPs have no gate)
    hidden_guessed: bool = False
    layer_pattern: str = ""  # NemotronH's blocks (M mamba, * attention, E MoE, - MLP)
    num_attention_heads: int = 0  # query heads (0: hidden_size / head_dim)
    attn_output_gate: bool = False  # Qwen3.5/3-Next: q_proj also gives the output gate
    tie_word_embeddings: bool = False
    shared_experts: int = 0  # shared experts a MoE layer runs for every token

    @property
    def is_hybrid(self) -> bool:
        return any(layer.kind in (MAMBA2, GDN) for layer in self.layers)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def state_shapes(self, tp: int, num_spec: int) -> StateShapes | None:
        """The per-rank state of one SSM layer (vLLM's `mamba_utils` shapes)."""
        if self.mamba:
            m = self.mamba
            groups = m["n_groups"]  # extra groups for head shards: only when groups % tp
            if groups % tp:
                groups = groups + (tp - groups % tp)
            intermediate = m["num_heads"] * m["head_dim"]
            width = (intermediate + 2 * groups * m["state_size"]) // tp
            temporal = (m["num_heads"] // tp) * m["head_dim"] * m["state_size"]
            return StateShapes(m["conv_kernel"] - 1 + num_spec, width, temporal)
        if self.gdn:
            g = self.gdn
            width = (
                2 * g["head_k_dim"] * g["num_k_heads"] + g["head_v_dim"] * g["num_v_heads"]
            ) // tp
            temporal = (g["num_v_heads"] // tp) * g["head_v_dim"] * g["head_k_dim"]
            return StateShapes(g["conv_kernel"] - 1 + num_spec, width, temporal)
        return None


def _text_config(cfg: Mapping) -> tuple[dict, bool]:
    for key in ("text_config", "language_config", "llm_config"):
        inner = cfg.get(key)
        if isinstance(inner, Mapping) and inner.get("num_hidden_layers"):
            return dict(inner), True
    return dict(cfg), False


def _int(cfg: Mapping, *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) and value > 0:
            return int(value)
    return default


def _dtype(text: Mapping, root: Mapping) -> str:
    for cfg in (text, root):
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if isinstance(value, str) and value in DTYPE_BYTES:
                return {"float": "float32", "half": "float16"}.get(value, value)
    return "bfloat16"


def read_model(config: Mapping) -> TextModel:
    """The model of a config.json (its text part for a multimodal one)."""
    if not isinstance(config, Mapping):
        raise ModelConfigError("config.json is not a JSON object")
    text, multimodal = _text_config(config)
    layers_n = _int(text, "num_hidden_layers", "n_layer", "num_layers")
    if not layers_n:
        raise ModelConfigError("config.json has no num_hidden_layers")
    heads = _int(text, "num_attention_heads", "n_head", default=1)
    hidden = _int(text, "hidden_size", "d_model", "n_embd")
    if not hidden and _int(text, "head_dim"):
        # An abridged config: the KV layout does not need it; the activation estimate
        # takes the attention width instead (noted by the caller through hidden_guessed).
        hidden = heads * _int(text, "head_dim")
        text = {**text, "_hidden_guessed": True}
    if not hidden:
        raise ModelConfigError("config.json has no hidden_size (nor head_dim to stand in)")
    kv_heads = _int(text, "num_key_value_heads", "num_kv_heads", default=heads)
    head_dim = _int(text, "head_dim", default=hidden // max(heads, 1))
    kinds = _layer_kinds(text, layers_n)
    layers: list[Layer] = []
    mla = bool(text.get("kv_lora_rank")) and text.get("qk_rope_head_dim") is not None
    for kind in kinds:
        if kind == FULL and mla:
            rank = int(text["kv_lora_rank"]) + int(text["qk_rope_head_dim"])
            layers.append(Layer(MLA, kv_heads=1, head_dim=rank, head_dim_v=0))
        elif kind == FULL and text.get("global_head_dim"):  # Gemma 4's global layers
            # K and V both keep a page even where the checkpoint shares them
            # (attention_k_eq_v): vLLM 0.20.0 on a GB10 gave gemma-4-26B-A4B 35.75×
            # concurrency at 8,192 tokens, which only K + V pages reproduce.
            g_heads = _int(text, "num_global_key_value_heads", default=kv_heads)
            g_dim = int(text["global_head_dim"])
            layers.append(Layer(FULL, g_heads, g_dim, g_dim))
        elif kind == SLIDING:
            layers.append(Layer(SLIDING, kv_heads, head_dim, head_dim,
                                window=_int(text, "sliding_window", default=0)))  # fmt: skip
        elif kind == FULL:
            layers.append(Layer(FULL, kv_heads, head_dim, head_dim))
        else:
            layers.append(Layer(kind))
    mtp = _int(text, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)
    mamba: dict = {}
    gdn: dict = {}
    if MAMBA2 in kinds:
        num_heads = _int(text, "mamba_num_heads", default=0)
        mamba_head_dim = _int(text, "mamba_head_dim", default=0)
        if not num_heads:  # Mamba2 configs that give expand × hidden instead
            expand = _int(text, "expand", default=2)
            mamba_head_dim = mamba_head_dim or 64
            num_heads = expand * hidden // mamba_head_dim
        mamba = {
            "num_heads": num_heads, "head_dim": mamba_head_dim,
            "n_groups": _int(text, "n_groups", "mamba_n_groups", default=1),
            "state_size": _int(text, "ssm_state_size", "mamba_d_state", "state_size", default=128),
            "conv_kernel": _int(text, "conv_kernel", "mamba_d_conv", default=4),
        }  # fmt: skip
    if GDN in kinds:
        gdn = {
            "num_k_heads": _int(text, "linear_num_key_heads", default=16),
            "num_v_heads": _int(text, "linear_num_value_heads", default=32),
            "head_k_dim": _int(text, "linear_key_head_dim", default=128),
            "head_v_dim": _int(text, "linear_value_head_dim", default=128),
            "conv_kernel": _int(text, "linear_conv_kernel_dim", default=4),
        }
    experts = _int(text, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    return TextModel(
        architecture=str((config.get("architectures") or ["?"])[0]),
        model_type=str(text.get("model_type") or config.get("model_type") or ""),
        dtype=_dtype(text, config),
        hidden_size=hidden,
        vocab_size=_int(text, "vocab_size", default=_int(config, "vocab_size", default=32000)),
        num_layers=layers_n,
        layers=tuple(layers),
        intermediate_size=_int(text, "intermediate_size", "ffn_hidden_size", default=4 * hidden),
        moe_intermediate_size=_int(text, "moe_intermediate_size", "intermediate_size", default=0),
        moe_latent_size=_int(text, "moe_latent_size", default=0) if experts else 0,
        moe_shared_intermediate_size=_int(
            text, "moe_shared_expert_intermediate_size", "shared_expert_intermediate_size"
        )
        if experts
        else 0,
        num_experts=experts,
        experts_per_token=_int(text, "num_experts_per_tok", "top_k_experts", "moe_topk")
        if experts
        else 0,
        max_position_embeddings=_int(
            text,
            "max_position_embeddings",
            "max_seq_len",
            default=_int(config, "max_position_embeddings"),
        ),
        mtp_layers=mtp,
        config_ssm_dtype=str(text.get("mamba_ssm_dtype") or ""),
        mamba=mamba,
        gdn=gdn,
        is_multimodal=multimodal or "vision_config" in config,
        quantization=dict(quant) if isinstance(quant, Mapping) else {},
        gated_mlp=str(text.get("mlp_hidden_act") or text.get("hidden_act") or "silu")
        not in ("relu2", "gelu", "gelu_new", "relu"),
        hidden_guessed=bool(text.get("_hidden_guessed")),
        layer_pattern=str(text.get("hybrid_override_pattern") or ""),
        num_attention_heads=heads,
        shared_experts=_int(
            text,
            "n_shared_experts",
            "num_shared_experts",
            default=int(
                bool(
                    _int(
                        text,
                        "moe_shared_expert_intermediate_size",
                        "shared_expert_intermediate_size",
                    )
                )
            ),
        )
        if experts
        else 0,
        attn_output_gate=bool(text.get("attn_output_gate")),
        tie_word_embeddings=bool(
            text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
        ),
    )


def _layer_kinds(text: Mapping, n: int) -> list[str]:
    """FULL / SLIDING / MAMBA2 / GDN per layer, as the model class builds them; layers
    without state (NemotronH's MLP and MoE blocks) are left out."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:  # NemotronH: M mamba, * attention, - / E mlp
        return [MAMBA2 if c == "M" else FULL for c in pattern if c in "M*"]
    types = text.get("layer_types")
    if isinstance(types, list) and len(types) >= n:
        out = []
        for t in types[:n]:
            t = str(t)
            if t in ("linear_attention", "gated_delta_net"):
                out.append(GDN)
            elif t in ("mamba", "mamba2"):
                out.append(MAMBA2)
            elif "sliding" in t or t == "local":
                out.append(SLIDING)
            else:
                out.append(FULL)
        return out
    interval = text.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0 and text.get("linear_num_value_heads"):
        return [FULL if (i + 1) % interval == 0 else GDN for i in range(n)]
    window = text.get("sliding_window")
    use_window = text.get("use_sliding_window", bool(window))
    if (
        isinstance(window, int)
        and window > 0
        and use_window
        and text.get("model_type") in ("mistral", "gemma2", "gemma3_text", "gpt_oss")
    ):
        return [SLIDING] * n
    return [FULL] * n
