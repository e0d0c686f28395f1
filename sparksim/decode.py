"""What one decode step reads, from the checkpoint vLLM loads (sparksim/checkpoint.py), not
from a profile picked by name.

A step over n sequences reads every weight outside the routed experts once — attention or
state-space mixers, dense MLPs, shared experts, norms and the output head (the input
embedding table is only indexed) — plus, in each MoE layer, every routed expert at least one
of the n tokens chose: with E experts and top-k routing, E·(1 − (1 − k/E)^n) of them on
average (uniform routing). The bytes come from the checkpoint's real size: each part at the
format its quantization config gives it (step_reads, component_formats), the parts scaled
together to the size. The draft (MTP) layers are read only by speculative decoding.

With speculative decoding (vllm_adapter/speculative.py) a step verifies 1 + k tokens of each
sequence in one target pass — so a MoE step touches the experts of n·(1 + k) tokens, which
is why MTP gains little on a big MoE at one stream — and runs the drafter k times (once for
a block drafter, never for a prompt lookup). A drafter pass reads what DraftReads holds: an
MTP layer (bf16, its touched experts) and the output head again, an EAGLE head, or a draft
checkpoint.

Checked against public measurements: Llama-3.3-70B NVFP4 reads 40.6 GB a token
(NVIDIA/dgx-spark-playbooks PR #91's roofline: 40.61 GB); gpt-oss-20b's parts add up to its
index's total_size within 1 %.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_adapter.startup import params
from vllm_adapter.startup.model import FULL, MAMBA2, TextModel

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
    head_bytes: float = 0.0  # the output head (in dense_bytes), read again by an MTP pass
    scale: float = 1.0  # checkpoint size ÷ what its config explains

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
    `draft_in_checkpoint`).

    Each part of the checkpoint at its own format (component_formats: the routed experts
    at the checkpoint's format, the attention / state-space mixers, shared experts and
    dense MLPs at what the quantization config gives them, the output head bf16 unless the
    config quantizes it), then all of it scaled to the checkpoint's real size: bytes the
    config does not explain (a mixed export, layers kept in a wider format) are spread over
    every part rather than put on the parts read every step."""
    f = component_formats(model, weight_format)
    h, vocab = model.hidden_size, model.vocab_size
    one = params.expert_params(model)
    layers = params.moe_layers(model)
    routed = layers * model.num_experts * one
    other = max(params.total_params(model) - routed - 2 * vocab * h, 0)
    head_params = 0 if model.tie_word_embeddings else vocab * h
    draft = params.draft_params(model) * 2.0 if draft_in_checkpoint else 0.0
    parts = {
        "routed": routed * f.experts,
        "other": other * f.other,
        "head": head_params * f.head,
        "embedding": vocab * h * 2.0,
        "draft": draft,
    }
    scale = checkpoint_bytes / sum(parts.values()) if sum(parts.values()) else 1.0
    # A tied head is the embedding table, read in full by the head each step.
    head = (parts["head"] if head_params else parts["embedding"]) * scale
    dense = parts["other"] * scale + head
    return StepReads(dense / tp, one * f.experts * scale / tp, layers, model.num_experts,
                     model.experts_per_token, draft * scale / tp, head_bytes=head / tp,
                     scale=scale)  # fmt: skip


@dataclass(frozen=True)
class Formats:
    """Bytes a parameter of each part of a checkpoint takes."""

    experts: float
    other: float  # mixers, shared experts, dense MLPs, routers
    head: float


# What a quantization config names a module by: the projections of the attention and
# state-space mixers (conv1d and norms are too small to matter), the output head.
MIXER_WORDS = ("self_attn", "linear_attn", "q_proj", "k_proj", "v_proj", "o_proj",
               "in_proj", "out_proj", "qkv")  # fmt: skip
_LAYER = re.compile(r"layers\.(\d+)\.")


def _mixer_kinds(model: TextModel) -> list[str]:
    """The mixer of each layer by its index in the checkpoint (NemotronH's pattern numbers
    its MoE and MLP blocks too: they have none)."""
    if model.layer_pattern:
        kind = {"M": MAMBA2, "*": FULL}
        return [kind.get(c, "") for c in model.layer_pattern]
    return [layer.kind for layer in model.layers]


def _algo_bytes(algo) -> float | None:
    a = str(algo or "").upper()
    if "FP8" in a or "INT8" in a or a == "W8A8":
        return 1.0
    if "MXFP4" in a:
        return EXPERT_BYTES["mxfp4"]
    if "FP4" in a:
        return EXPERT_BYTES["nvfp4"]
    if "INT4" in a or "W4" in a or "AWQ" in a:
        return EXPERT_BYTES["int4"]
    return None


def component_formats(model: TextModel, weight_format: str) -> Formats:
    """Each part's bytes a parameter, from the quantization config vLLM reads: ModelOpt's
    per-module `quantized_layers`, and the modules left alone (`exclude_modules`, `ignore`,
    `modules_to_not_convert`: bf16); the checkpoint's format everywhere else but the output
    head, which stays bf16 unless the config quantizes it (ModelOpt's and llm-compressor's
    exports keep it so)."""
    q = model.quantization or {}
    base = EXPERT_BYTES.get(weight_format, 2.0)
    if base >= 2.0:
        return Formats(base, base, 2.0)
    per_module = q.get("quantized_layers") if isinstance(q.get("quantized_layers"), dict) else {}
    left: list[str] = []
    for key in ("ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers"):
        names = q.get(key)
        if isinstance(names, list):
            left += [str(n) for n in names]

    def named(words: tuple[str, ...]) -> list[float]:
        found = []
        for name, spec in per_module.items():
            if any(w in name for w in words) and isinstance(spec, dict):
                found.append(_algo_bytes(spec.get("quant_algo")))
        return [b for b in found if b]

    mixers = named(MIXER_WORDS)
    if mixers:
        other = sum(mixers) / len(mixers)
    else:
        # The mixers the config leaves unquantized, by their parameters: a pattern without
        # a layer number covers them all, else the layers it names.
        hits = [n for n in left if any(w in n for w in MIXER_WORDS)]
        numbered = {int(m) for n in hits for m in _LAYER.findall(n)}
        kinds = _mixer_kinds(model)
        if any(not _LAYER.search(n) for n in hits):
            numbered = set(range(len(kinds)))
        bf16 = sum(params.mixer_params(model, kinds[i]) for i in numbered if i < len(kinds))
        total = max(params.total_params(model) - 2 * model.vocab_size * model.hidden_size
                    - params.moe_layers(model) * model.num_experts
                    * params.expert_params(model), 1)  # fmt: skip
        share = min(bf16 / total, 1.0)
        other = share * 2.0 + (1 - share) * base
    head = named(("lm_head",))
    quantized_head = head and not any("lm_head" in n for n in left)
    return Formats(base, other, head[0] if quantized_head else 2.0)


# Model families whose decode on a DGX Spark public measurements check (config.json
# `model_type`; the measurements and their errors: docs/BENCHMARKS.md, `make bench`). Any
# other model is decoded by the same model of its reads, labelled "estimated".
MEASURED_FAMILIES = {
    "llama": "Llama-3.3-70B NVFP4 (NVIDIA/dgx-spark-playbooks #79)",
    "gpt_oss": "gpt-oss-20b / -120b MXFP4 (djangodevreng/dgx-spark-benchmarks, kubis.ai)",
    "nemotron_h": "Nemotron-3 Nano and Super NVFP4, MTP (vLLM blog, djangodevreng)",
    "qwen3_5_moe": "Qwen3.6-35B-A3B BF16 / NVFP4 + MTP, Qwen3.5-122B INT4 (djangodevreng, "
    "inference-atlas, NVIDIA forum)",
    "gemma4": "Gemma-4-26B-A4B BF16 and online FP8 (djangodevreng, kubis.ai)",
}


def calibration_note(model: TextModel) -> str:
    """How far sparksim's decode speed for this model is backed by measurements."""
    family = MEASURED_FAMILIES.get(model.model_type.removesuffix("_text"))
    if family:
        return f"decode speed checked against public DGX Spark measurements of {family}"
    return (f"decode speed estimated from the checkpoint's reads (no public DGX Spark "
            f"measurement of a {model.model_type or 'model'} of this family)")  # fmt: skip


# EAGLE-3 heads predict over a reduced draft vocabulary (draft_vocab_size 32000 in the
# published heads: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, nvidia/gpt-oss-120b-Eagle3).
EAGLE3_DRAFT_VOCAB = 32_000


def draft_reads(model: TextModel, family: str, method: str = "", tp: int = 1,
                draft_checkpoint_bytes: float | None = None,
                head_bytes: float | None = None) -> DraftReads:  # fmt: skip
    """One drafter pass of `model`'s speculative decoding, per Spark.

    MTP: one of the model's MTP layers (bf16) with the experts its tokens touch, and the
    shared output head again. A drafter with its own checkpoint (EAGLE, DFlash, a draft
    model) found in the cache: that checkpoint less its input embedding. Without it, an
    estimate: one dense decoder layer of the target's width and an output head (EAGLE-3's
    32k draft vocabulary). A prompt lookup (n-gram, suffix) reads no weights."""
    h = model.hidden_size
    # The target's output head, at its format (per Spark when given by StepReads).
    head = head_bytes * tp if head_bytes else model.vocab_size * h * 2.0
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
