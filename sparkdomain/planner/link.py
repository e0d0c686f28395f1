"""The link between a pair of Sparks: what tensor parallelism's all-reduces cost a step.

A decode step of a TP-2 model reads each Spark's half of the active weights in parallel,
then pays the all-reduces over the ConnectX link: two per layer (after attention or the
mixer, and after the MLP or the experts), each a latency plus the activations' bytes. The
planner's decode ceiling and sparksim's step timing both use these functions.

The figures are assumptions, not measurements (no pair was measured here): 200 Gb/s is
the ConnectX-7 port of a DGX Spark; 25 µs per small all-reduce is NCCL's order of magnitude
for two nodes over RoCE. docs/sparksim.md says how they enter sparksim's timing.
"""

from __future__ import annotations

from sparkdomain.planner.inputs import Architecture

LINK_GBITS = 200.0  # the ConnectX-7 link between two Sparks, Gb/s
ALLREDUCE_LATENCY_S = 25e-6  # one small all-reduce between two nodes over RoCE (assumed)
ALLREDUCES_PER_LAYER = 2  # after attention (or the mixer) and after the MLP (or experts)
ACTIVATION_BYTES = 2  # bf16 activations, whatever the weights' format
# The hidden size when the checkpoint's is unknown: typical of the models a Spark serves.
# At decode the latency dominates (8 KiB per token is 0.3 µs on the link), so an error here
# moves a step by microseconds.
DEFAULT_HIDDEN_SIZE = 4096
# vLLM model classes whose attention normalizes q and k over every head (MiniMax-M2: its
# MiniMaxText01RMSNormTP whatever the config says).
WHOLE_QK_NORM_CLASSES = {"MiniMaxM2ForCausalLM"}


def allreduce_seconds(
    tokens: int,
    *,
    tp: int = 2,
    hidden_size: int | None = None,
    link_gbits: float = LINK_GBITS,
    latency_s: float = ALLREDUCE_LATENCY_S,
) -> float:
    """One ring all-reduce of `tokens` tokens' activations over `tp` ranks: a latency, plus
    each rank sending 2 (tp − 1) / tp of the message over the link. 0 for one rank."""
    if tp <= 1 or tokens <= 0:
        return 0.0
    message = tokens * (hidden_size or DEFAULT_HIDDEN_SIZE) * ACTIVATION_BYTES
    return latency_s + 2 * (tp - 1) / tp * message / (link_gbits * 1e9 / 8)


def allreduces_per_layer(config: dict) -> int:
    """The all-reduces one layer of this model pays under tensor parallelism, from its
    config.json: the two every layer pays, plus one where vLLM's model code reduces across
    ranks inside the attention — MiniMax-M2's query/key RMSNorm over the whole projection
    (`qk_norm_type: per_layer`): each rank holds a slice of the heads, so the variance is
    all-reduced before the norm (vllm/model_executor/layers/minimax_rms_norm/rms_norm_tp.py,
    one fused reduce for q and k)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    classes = {str(a) for a in config.get("architectures") or [] if isinstance(a, str)}
    whole_qk_norm = text.get("use_qk_norm") and text.get("qk_norm_type") == "per_layer"
    if whole_qk_norm or classes & WHOLE_QK_NORM_CLASSES:
        return ALLREDUCES_PER_LAYER + 1
    return ALLREDUCES_PER_LAYER


def step_comm_seconds(
    arch: Architecture, tokens: int, *, tp: int = 2, hidden_size: int | None = None
) -> float:
    """The link's share of one engine step that computes `tokens` tokens (one per decoding
    sequence plus the step's prefill chunk): the all-reduces of every layer
    (`arch.tp_allreduces_per_layer`, allreduces_per_layer). 0 for one
    rank, or when the layer count is unknown (the planner then says so)."""
    if tp <= 1 or not arch.num_layers:
        return 0.0
    per_layer = arch.tp_allreduces_per_layer * allreduce_seconds(
        tokens, tp=tp, hidden_size=hidden_size
    )
    return arch.num_layers * per_layer
