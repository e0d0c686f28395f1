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


def step_comm_seconds(
    arch: Architecture, tokens: int, *, tp: int = 2, hidden_size: int | None = None
) -> float:
    """The link's share of one engine step that computes `tokens` tokens (one per decoding
    sequence plus the step's prefill chunk): the all-reduces of every layer. 0 for one
    rank, or when the layer count is unknown (the planner then says so)."""
    if tp <= 1 or not arch.num_layers:
        return 0.0
    per_layer = ALLREDUCES_PER_LAYER * allreduce_seconds(tokens, tp=tp, hidden_size=hidden_size)
    return arch.num_layers * per_layer
