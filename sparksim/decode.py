"""What one decode step reads, from the checkpoint vLLM loads (sparksim/checkpoint.py), not
from a profile picked by name.

A step over n sequences reads every weight outside the routed experts once — attention or
state-space mixers, dense MLPs, shared experts, norms and the output head (the input
embedding table is only indexed) — plus, in each MoE layer, every routed expert at least one
of the n tokens chose: with E experts and top-k routing, E·(1 − (1 − k/E)^n) of them on
average (uniform routing). The bytes come from the checkpoint's real size: the routed
experts at the checkpoint's format (the quantizers this covers — ModelOpt NVFP4, MXFP4,
AutoRound/GPTQ INT4, FP8 — quantize the experts), everything else is the remainder, which
holds the bf16 parts a mixed checkpoint keeps. The draft (MTP) layers are read only by
speculative decoding.

Checked against public measurements: Llama-3.3-70B NVFP4 reads 40.61 GB a token
(NVIDIA/dgx-spark-playbooks PR #91 gives the same 40.61 GB roofline).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_adapter.startup import params
from vllm_adapter.startup.model import TextModel

# Bytes a routed-expert parameter takes at the checkpoint's format, scales included:
# NVFP4 4 bits + an fp8 scale per 16 (4.5 bits); MXFP4 4 bits + an e8m0 scale per 32 (4.25);
# INT4 with group size 128 and fp16 scales (4.125).
EXPERT_BYTES = {"nvfp4": 4.5 / 8, "mxfp4": 4.25 / 8, "int4": 4.125 / 8, "fp8": 1.0, "int8": 1.0,
                "bf16": 2.0, "fp16": 2.0, "float16": 2.0, "bfloat16": 2.0}  # fmt: skip


@dataclass(frozen=True)
class StepReads:
    """What a decode step reads, per Spark (tensor parallel splits every part)."""

    dense_bytes: float  # read once a step
    expert_bytes: float  # one routed expert of one layer
    moe_layers: int
    experts: int
    top_k: int
    draft_bytes: float = 0.0  # the MTP layers, read per speculative token

    def weights(self, tokens: int) -> float:
        """Bytes of weights a step over `tokens` tokens reads."""
        if not self.moe_layers or tokens <= 0:
            return self.dense_bytes
        e, k = self.experts, min(self.top_k, self.experts)
        touched = e * (1 - (1 - k / e) ** tokens)
        return self.dense_bytes + self.moe_layers * touched * self.expert_bytes


def step_reads(model: TextModel, checkpoint_bytes: float, weight_format: str,
               tp: int = 1, draft_in_checkpoint: bool = False) -> StepReads:  # fmt: skip
    """The reads of one decode step of `model`, whose checkpoint is `checkpoint_bytes`
    (holding its draft layers, bf16 as the usual MTP exports keep them, when
    `draft_in_checkpoint`)."""
    per_param = EXPERT_BYTES.get(weight_format, 2.0)
    embedding = model.vocab_size * model.hidden_size * 2  # indexed, not read (bf16)
    draft = params.draft_params(model) * 2.0 if draft_in_checkpoint else 0.0
    one = params.expert_params(model) * per_param
    layers = params.moe_layers(model)
    routed = layers * model.num_experts * one
    dense = max(checkpoint_bytes - routed - embedding - draft, checkpoint_bytes * 0.02)
    return StepReads(dense / tp, one / tp, layers, model.num_experts,
                     model.experts_per_token, draft / tp)  # fmt: skip
