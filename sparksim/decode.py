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

With speculative decoding (sparkdomain/speculative.py) a step verifies 1 + k tokens of each
sequence in one target pass — so a MoE step touches the experts of n·(1 + k) tokens, which
is why MTP gains little on a big MoE at one stream — and runs the drafter k times (once for
a block drafter, never for a prompt lookup). A drafter pass reads what DraftReads holds: an
MTP layer (bf16, its touched experts) and the output head again, an EAGLE head, or a draft
checkpoint.

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
class DraftReads:
    """What one drafter pass over n sequences reads, per Spark."""

    dense_bytes: float  # read once a pass (the head, the output projection)
    expert_bytes: float = 0.0  # one routed expert of the draft layer (an MoE MTP layer)
    experts: int = 0
    top_k: int = 0
    source: str = ""  # how the size was found, in words

    def weights(self, tokens: int) -> float:
        if not self.experts or tokens <= 0:
            return self.dense_bytes
        return self.dense_bytes + _touched(self.experts, self.top_k, tokens) * self.expert_bytes


def _touched(experts: int, top_k: int, tokens: int) -> float:
    """Routed experts n tokens touch in one layer, uniform routing: E·(1 − (1 − k/E)^n)."""
    k = min(top_k, experts)
    return experts * (1 - (1 - k / experts) ** tokens)


@dataclass(frozen=True)
class StepReads:
    """What a decode step reads, per Spark (tensor parallel splits every part)."""

    dense_bytes: float  # read once a step
    expert_bytes: float  # one routed expert of one layer
    moe_layers: int
    experts: int
    top_k: int
    draft_bytes: float = 0.0  # the MTP layers in the checkpoint (not read without drafts)
    draft: DraftReads | None = None  # one drafter pass, with speculative decoding

    def weights(self, tokens: int) -> float:
        """Bytes of weights a step over `tokens` tokens reads."""
        if not self.moe_layers or tokens <= 0:
            return self.dense_bytes
        touched = _touched(self.experts, self.top_k, tokens)
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


# EAGLE-3 heads predict over a reduced draft vocabulary (draft_vocab_size 32000 in the
# published heads: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, nvidia/gpt-oss-120b-Eagle3).
EAGLE3_DRAFT_VOCAB = 32_000


def draft_reads(model: TextModel, family: str, method: str = "", tp: int = 1,
                draft_checkpoint_bytes: float | None = None) -> DraftReads:  # fmt: skip
    """One drafter pass of `model`'s speculative decoding, per Spark.

    MTP: one of the model's MTP layers (bf16) with the experts its tokens touch, and the
    shared output head again. A drafter with its own checkpoint (EAGLE, DFlash, a draft
    model) found in the cache: that checkpoint less its input embedding. Without it, an
    estimate: one dense decoder layer of the target's width and an output head (EAGLE-3's
    32k draft vocabulary). A prompt lookup (n-gram, suffix) reads no weights."""
    h = model.hidden_size
    head = model.vocab_size * h * 2.0
    if family == "lookup":
        return DraftReads(0.0, source="prompt lookup: no drafter weights")
    if family == "mtp" and model.mtp_layers:
        per_layer = params.draft_params(model) / model.mtp_layers
        one = params.expert_params(model)
        experts = model.num_experts if model.is_moe else 0
        dense = (per_layer - experts * one) * 2.0 + head
        return DraftReads(dense / tp, one * 2.0 / tp, experts, model.experts_per_token,
                          "an MTP layer of the checkpoint (bf16) and the output head")  # fmt: skip
    if draft_checkpoint_bytes:
        own = max(draft_checkpoint_bytes - model.vocab_size * h * 2.0, draft_checkpoint_bytes / 2)
        return DraftReads(own / tp, source="the draft checkpoint in the cache")
    layer = params.attention_params(model) + 3 * h * max(model.intermediate_size or 0, 3 * h)
    if method == "eagle3":
        head = EAGLE3_DRAFT_VOCAB * h * 2.0 + 3 * h * h * 2.0
    layers = 5 if family == "dflash" else 1
    return DraftReads((layers * layer * 2.0 + head) / tp,
                      source="estimated: no draft checkpoint in the cache")  # fmt: skip
