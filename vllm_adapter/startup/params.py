"""Parameter counts by block, from config.json: what share of a checkpoint the draft (MTP)
layers are, and the weights when no checkpoint size is known (a labelled fallback)."""

from __future__ import annotations

from vllm_adapter.startup.model import FULL, GDN, MAMBA2, MLA, SLIDING, TextModel


def attention_params(model: TextModel) -> int:
    """q, k, v and o of one attention layer: the query width is heads × head_dim (wider
    than hidden in gpt-oss, Qwen3.5), doubled where q_proj also gives the output gate."""
    h = model.hidden_size
    layer = next((x for x in model.layers if x.kind in (FULL, SLIDING, MLA)), None)
    if layer is None:
        return 0
    head_dim = layer.head_dim or 128
    q_heads = model.num_attention_heads or max(h // head_dim, 1)
    if layer.kind == MLA:  # a latent of head_dim per token: the query as wide as hidden
        q_heads = max(h // head_dim, 1)
    q = q_heads * head_dim
    gate = q if model.attn_output_gate else 0
    return (q + gate) * h + q * h + 2 * max(layer.kv_heads, 1) * head_dim * h


def mlp_params(model: TextModel) -> int:
    mats = 3 if model.gated_mlp else 2
    return mats * model.hidden_size * model.intermediate_size


def moe_params(model: TextModel) -> int:
    """Routed experts, the router and the shared expert. A latent MoE (Nemotron 3 Super,
    `moe_latent_size`) projects hidden → latent and back around experts that work in the
    latent width (vLLM's nemotron_h.py: fc1_latent_proj / fc2_latent_proj)."""
    mats = 3 if model.gated_mlp else 2
    h = model.hidden_size
    experts = model.num_experts * expert_params(model)
    latent = 2 * h * model.moe_latent_size
    # Shared experts: their own width (Qwen, Nemotron), or n_shared_experts of the routed
    # width (DeepSeek, GLM); none in gpt-oss, Qwen3-MoE, MiniMax, Mixtral.
    shared = mats * h * (model.moe_shared_intermediate_size
                         or model.shared_experts * model.moe_intermediate_size)  # fmt: skip
    return experts + latent + h * model.num_experts + shared


def mixer_params(model: TextModel, kind: str) -> int:
    """One layer's mixer (gated delta net, Mamba2, or attention; none for "")."""
    if not kind:
        return 0
    h = model.hidden_size
    if kind == GDN and model.gdn:
        g = model.gdn
        key, value = g["num_k_heads"] * g["head_k_dim"], g["num_v_heads"] * g["head_v_dim"]
        return h * (2 * key + 2 * value + 2 * g["num_v_heads"]) + value * h
    if kind == MAMBA2 and model.mamba:
        m = model.mamba
        inner = m["num_heads"] * m["head_dim"]
        return h * (2 * inner + 2 * m["n_groups"] * m["state_size"] + m["num_heads"]) + inner * h
    return attention_params(model)


def ffn_params(model: TextModel) -> int:
    return moe_params(model) if model.is_moe else mlp_params(model)


def total_params(model: TextModel) -> int:
    """Every block of the target model and the embeddings (lm_head counted apart)."""
    h = model.hidden_size
    if model.layer_pattern:  # NemotronH: one block per character
        per = {"M": mixer_params(model, MAMBA2), "*": attention_params(model),
               "E": moe_params(model), "-": mlp_params(model)}  # fmt: skip
        blocks = sum(per.get(c, 0) for c in model.layer_pattern)
    else:
        blocks = sum(mixer_params(model, layer.kind) + ffn_params(model)
                     for layer in model.layers)  # fmt: skip
    return blocks + 2 * model.vocab_size * h


def draft_params(model: TextModel) -> int:
    """The MTP layers (each a decoder layer and its 2h → h projection)."""
    if not model.mtp_layers:
        return 0
    h = model.hidden_size
    return model.mtp_layers * (attention_params(model) + ffn_params(model) + 2 * h * h)


def expert_params(model: TextModel) -> int:
    """One routed expert of one layer (in the latent width for a latent MoE); 0 for a dense
    model."""
    if not model.is_moe:
        return 0
    mats = 3 if model.gated_mlp else 2
    return mats * (model.moe_latent_size or model.hidden_size) * model.moe_intermediate_size


def moe_layers(model: TextModel) -> int:
    """The layers with routed experts (NemotronH's "E" blocks, else every layer)."""
    if not model.is_moe:
        return 0
    return model.layer_pattern.count("E") if model.layer_pattern else model.num_layers


def active_params(model: TextModel) -> int:
    """What one token reads of a MoE model: every block but the routed experts, plus
    `experts_per_token` of them (and the shared expert), and the embeddings."""
    if not model.is_moe:
        return total_params(model)
    unused = model.num_experts - model.experts_per_token
    return total_params(model) - moe_layers(model) * unused * expert_params(model)
