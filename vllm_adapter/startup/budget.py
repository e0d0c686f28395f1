"""The memory vLLM takes before the KV cache: weights, what the profiling run peaks at, the
memory outside torch, the CUDA-graph estimate — and the start gate. Pure arithmetic.

vLLM 0.33 (gpu_worker.py::determine_available_memory, utils/mem_utils.py::memory_profiling):

    requested     = ceil(total × utilization)            (the start gate: free0 < requested raises)
    non_kv        = consumed + activation_peak           (consumed: free0 - free after profiling,
                                                          MemAvailable on a GB10)
    available_kv  = requested - non_kv - cudagraph_estimate   (subtracted by default since 0.20)

What is exact here: the gate and its words, the order, the weights when the checkpoint size
is known (less the draft layers a command without speculative decoding does not load). What
is an estimate, labelled as one: the activation peak of the profiling run (the largest
transient tensors of one forward over max_num_batched_tokens tokens — MLP, gated-delta-net
projections, the MoE workspace — plus the sampler's logits) and the memory outside torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vllm_adapter.startup import params
from vllm_adapter.startup.model import DTYPE_BYTES, GDN, MAMBA2, TextModel

GIB = 1 << 30
# Memory a GB10 start-up takes outside torch's allocator before the KV cache: the CUDA
# context, cuBLAS/cuDNN workspaces, NCCL, compiled kernels. vLLM 0.27.1 on a GB10 printed
# "Actual usage is 3.35 GiB for consumed memory (weights + non-torch)" for Qwen3-0.6B, whose
# weights are 1.12 GiB: 2.2 GiB outside torch (a public DGX Spark set-up memo, 2026-09 — one
# log, which the memory-truth check outside the repository also holds: a single figure, to
# be replaced by a model of what counts against MemAvailable during the profile).
NON_TORCH_GB10_GIB = 2.2

START_GATE = (
    "Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup is less than desired "
    "GPU memory utilization ({util}, {requested:.2f} GiB). Decrease GPU memory utilization or "
    "reduce GPU memory used by other processes."
)


@dataclass
class Budget:
    requested: int
    weights: int
    weights_source: str
    activation_peak: int
    non_torch: int
    cudagraph_estimate: int
    cudagraph_subtracted: bool
    available_kv: int
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def bytes_per_param(fmt: str) -> float:
    return {"nvfp4": 0.5625, "mxfp4": 0.53125, "int4": 0.53125, "fp8": 1.0, "int8": 1.0}.get(
        fmt, 2.0
    )


def weights_bytes(model: TextModel, checkpoint_gib: float | None, loads_draft: bool,
                  tp: int) -> tuple[int, str]:  # fmt: skip
    """What "Model loading took" will say, per rank: the checkpoint, less the MTP layers a
    command without speculative decoding leaves on disk (their share of the parameters);
    without a checkpoint size, parameters × the checkpoint's format (labelled)."""
    total = params.total_params(model)
    draft = params.draft_params(model)
    if checkpoint_gib:
        size = checkpoint_gib * GIB
        if draft and not loads_draft:
            # The draft layers' share of the parameters, in the checkpoint's own format —
            # unless they stay bf16: the quantization config leaves them out, or the config
            # carries no quantization block at all for a checkpoint well below bf16 size
            # (ModelOpt's and llm-compressor's MTP exports keep the draft layers bf16:
            # Nemotron 3 Super NVFP4 on a GB10 loaded 75.03 GiB with its MTP layer and
            # 69.62 GiB without — 5.41 GiB, its ~2.9 B draft parameters at two bytes).
            quantized = size < (total + draft) * 1.5
            excluded = _mtp_unquantized(model) or (quantized and not model.quantization)
            size -= draft * 2 if excluded else size * draft / (total + draft)
            return int(size / tp), "checkpoint size less the draft layers"
        return int(size / tp), "checkpoint size"
    fmt = _format(model)
    count = total + (draft if loads_draft else 0)
    return int(count * bytes_per_param(fmt) / tp), f"parameters × {fmt} (no checkpoint size)"


def _mtp_unquantized(model: TextModel) -> bool:
    """Whether the quantization config names the MTP layers among what it leaves alone."""
    q = model.quantization
    for key in ("ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers"):
        names = q.get(key)
        if isinstance(names, list) and any("mtp" in str(n).lower() for n in names):
            return True
    return False


def _format(model: TextModel) -> str:
    q = model.quantization
    method = str(q.get("quant_method") or "").lower()
    algo = str(q.get("quant_algo") or q.get("format") or "").lower()
    if "fp4" in algo or method == "modelopt_fp4":
        return "nvfp4"
    if "fp8" in algo or method == "fp8":
        return "fp8"
    if method in ("awq", "gptq", "auto-round", "compressed-tensors") or "int4" in algo:
        return "int4"
    return "bf16"


def activation_peak(model: TextModel, tokens: int, seqs: int, tp: int) -> int:
    """The torch peak of vLLM's profiling run above what stays allocated — an estimate: the
    largest transient tensors of one layer's forward over `tokens` tokens (attention itself
    is skipped in the profile), the MoE workspace (modular_kernel.py: ws13 =
    max(T·topk·max(N/2, K), T·K), ws2 = T·topk·max(N, K) elements), the residual stream,
    and the sampler's fp32 logits over min(seqs, tokens) rows."""
    b = DTYPE_BYTES.get(model.dtype, 2)
    h = model.hidden_size
    residual = 3 * tokens * h * b
    if model.is_moe:
        n = 2 * model.moe_intermediate_size // tp
        k = model.moe_latent_size or h  # a latent MoE's experts work in the latent width
        topk = max(model.experts_per_token, 1)
        mlp = (max(tokens * topk * max(n // 2, k), tokens * k) + tokens * topk * max(n, k)) * b
    else:
        mlp = tokens * 3 * (model.intermediate_size // tp) * b
    mixer = 0
    kinds = {layer.kind for layer in model.layers}
    if GDN in kinds and model.gdn:
        g = model.gdn
        key, value = g["num_k_heads"] * g["head_k_dim"], g["num_v_heads"] * g["head_v_dim"]
        # in_proj (q, k, v, z, b, a), the conv output and the fp32 chunked-rule state
        mixer = tokens * ((2 * key + 2 * value) * b * 2 + value * 4) // tp
    if MAMBA2 in kinds and model.mamba:
        m = model.mamba
        inner = m["num_heads"] * m["head_dim"]
        mixer = max(mixer, tokens * (2 * inner + 2 * m["n_groups"] * m["state_size"]) * b * 2 // tp)
    logits = min(seqs, tokens) * model.vocab_size * 4 * 2
    return int(residual + max(mlp, mixer) + logits)


# The vision encoders vLLM profiles (one eager call over the modality with the most tokens
# per item; v1/worker/gpu_model_runner.py profile_run → _get_mm_dummy_batch; the same
# budget rule 0.12 → 0.34): (tokens per item, patches per output token, bytes per patch at
# the peak) with the towers' defaults in the shipped processor configs.
#
# Qwen3.5/3.6 (the Qwen3-VL tower, hidden 1152): a 4096×4096 image is 16,384 tokens of
# 2×2 patches; tensor liveness in qwen3_vl.py's attention stage holds 12·N·D·2 bytes, the
# pixels 1,536 bytes a patch — 1.80 GiB for one image. vLLM's profiler agrees: 0.27.1 on a
# GB10 printed "3.78 GiB for peak activation" for one such image (Qwen3.8-27B,
# max_num_batched_tokens 2048), a figure that holds its 1.94 GiB CUDA-graph estimate too
# (gpu_worker.py: peak_activation_memory = transient peak + the applied estimate): 1.84 GiB.
#
# Gemma 4 (a 32-frame video, 2,496 tokens of 630 patches a frame): N·(2D+3I)·2 with D 1152,
# I 4304 (the HF Gemma4VisionModel, which vLLM drives) — plus, with transformers before
# 5.10.1, the patch embedder's one-hot position lookup, `F.one_hot(positions, 10240)` int64
# cast to bf16 (2 × 10,240 × (8 + 2) bytes a patch; huggingface/transformers#46176 replaced
# it with F.embedding). vLLM's release images install the transformers of their build day:
# 0.22.0 (2026-05-29) and older predate 5.10.1 (2026-06-03). Families not listed: not
# estimated (noted).
QWEN_VL_PATCH_BYTES = 12 * 1152 * 2 + 1536
GEMMA4_ONE_HOT_PATCH_BYTES = 2 * 10240 * (8 + 2)
GEMMA4_ONE_HOT_UNTIL = "0.22.1"  # the first vLLM whose image has transformers ≥ 5.10.1
_VISION = {
    "Qwen3_5": (16384, 4, QWEN_VL_PATCH_BYTES),
    "Qwen3VL": (16384, 4, QWEN_VL_PATCH_BYTES),
    "Gemma4": (2496, 20160 / 2496, (2 * 1152 + 3 * 4304) * 2),
}
# The values in one patch of pixels the processor hands the tower (channels × temporal ×
# patch²): Qwen-VL 3 × 2 × 16 × 16, Gemma 4 3 × 16 × 16.
_PIXELS_PER_PATCH = {"Qwen3_5": 1536, "Qwen3VL": 1536, "Gemma4": 768}
# Memory outside torch that profiling a vision encoder adds on a GB10, where vLLM counts the
# drop of MemAvailable: the processor stack and a fixed share, and per dummy item its pixels
# in float32 twice over (the processor's output and the pinned staging copy the CUDA host
# allocator keeps). From public GB10 start-ups of the Qwen3-VL tower (one image: 2.4 GiB
# over the text-only figure — vLLM 0.27.1's "consumed memory" line; four images: 4.8–4.9
# GiB, vLLM 0.20).
MM_HOST_FIXED_GIB = 1.6
MM_HOST_PIXEL_COPIES = 2


def _dummy_items(model: TextModel, tokens: int, seqs: int,
                 max_model_len: int) -> tuple[str, int, int] | None:  # fmt: skip
    """The encoder family vLLM profiles for `model`, its tokens per dummy item and how many
    items one profiling call holds (`max(max_num_batched_tokens, one item)` worth, at most
    what max_num_seqs requests of max_model_len can hold); None when nothing is profiled or
    the family is not known."""
    family = next((f for f in _VISION if model.architecture.startswith(f)), None)
    if not model.is_multimodal or family is None:
        return None
    per_item = _VISION[family][0]
    budget = max(tokens, per_item)
    items = max(1, min(budget // per_item, seqs * max(1, max_model_len // per_item)))
    return family, per_item, items


def encoder_peak(model: TextModel, tokens: int, seqs: int, max_model_len: int,
                 text_peak: int, rules=None) -> tuple[int, str]:  # fmt: skip
    """What profiling the vision encoder adds to the activation peak: the encoder's own
    peak over n items, or the text forward's with the encoder's outputs kept alive — the
    larger (`max(P_vit, P_text + O_enc) − P_text`)."""
    if not model.is_multimodal:
        return 0, ""
    found = _dummy_items(model, tokens, seqs, max_model_len)
    if found is None:
        return 0, f"{model.architecture}: its encoder's profiling is not estimated"
    family, per_item, items = found
    _, patches_per_token, per_patch = _VISION[family]
    note = ""
    if family == "Gemma4" and rules is not None and not rules.at_least(GEMMA4_ONE_HOT_UNTIL):
        per_patch += GEMMA4_ONE_HOT_PATCH_BYTES
        note = " (with the one-hot position lookup of transformers before 5.10.1)"
    patches = items * per_item * patches_per_token
    vit = int(patches * per_patch + 18 * (1 << 20))
    outputs = items * per_item * model.hidden_size * DTYPE_BYTES.get(model.dtype, 2)
    extra = max(vit, text_peak + outputs) - text_peak
    return int(extra), f"vision encoder profiled with {items} item(s) of {per_item} tokens{note}"


def encoder_host_bytes(model: TextModel, tokens: int, seqs: int, max_model_len: int) -> int:
    """The memory outside torch that profiling the vision encoder adds (MM_HOST_*)."""
    found = _dummy_items(model, tokens, seqs, max_model_len)
    if found is None:
        return 0
    family, per_item, items = found
    pixels = items * per_item * _VISION[family][1] * _PIXELS_PER_PATCH[family] * 4
    return int(MM_HOST_FIXED_GIB * GIB + MM_HOST_PIXEL_COPIES * pixels)


# What one more captured graph adds to vLLM's estimate on a GB10: the estimate is the first
# capture (the largest batch's activations in the graph pool) plus (n − 1) × the second
# capture's growth (v1/worker/gpu_model_runner.py profile_cudagraph_memory), measured as a
# drop in free memory. GB10 logs at max_num_seqs 256 (51 piecewise and 35 full graphs)
# printed 1.65–2.02 GiB ("Estimated CUDA graph memory"; vLLM 0.18–0.27, four models): about
# 19 MiB a graph.
GRAPH_BYTES = 19 << 20


def capture_sizes(seqs: int, tokens: int, num_spec: int) -> list[int]:
    """vLLM's default CUDA-graph batch sizes (config/vllm.py _set_cudagraph_sizes): 1, 2, 4,
    then every 8 below 256 and every 16 from 256, up to min(2 × max_num_seqs × (1 +
    speculative tokens), 512, max_num_batched_tokens)."""
    top = min(seqs * (1 + num_spec) * 2, 512, tokens)
    sizes = [i for i in (1, 2, 4) if i <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


def cudagraph_estimate(model: TextModel, seqs: int, eager: bool, tokens: int = 8192,
                       num_spec: int = 0) -> int:  # fmt: skip
    """The CUDA-graph memory vLLM estimates (0.18+): the first capture — the graph pool
    holding the largest batch's activations — plus a fixed amount per further graph:
    piecewise graphs at every capture size and full ones for pure-decode batches up to
    max_num_seqs × (1 + speculative tokens)."""
    if eager:
        return 0
    b = DTYPE_BYTES.get(model.dtype, 2)
    sizes = capture_sizes(seqs, tokens, num_spec)
    if not sizes:
        return 0
    batch = sizes[-1]
    per_layer = batch * (model.hidden_size * 4 + max(model.intermediate_size, 1) * 3) * b
    first = per_layer * max(model.num_layers, 1) // 4 + 128 * (1 << 20)
    full = [s for s in sizes if s <= seqs * (1 + num_spec)]
    graphs = len(sizes) + len(full)
    return int(first + max(graphs - 2, 0) * GRAPH_BYTES)


def budget(*, model: TextModel, total_gib: float, free_gib: float | None, utilization: float,
           tokens: int, seqs: int, tp: int, checkpoint_gib: float | None, loads_draft: bool,
           eager: bool, kv_cache_memory_bytes: int | None, rules,
           env: dict | None = None, max_model_len: int = 0,
           language_only: bool = False, num_spec: int = 0,
           drafter_gib: float | None = None) -> Budget:  # fmt: skip
    total = int(total_gib * GIB)
    requested = math.ceil(total * utilization) if rules.gate_rounds_up else total * utilization
    requested = int(requested)
    weights, source = weights_bytes(model, checkpoint_gib, loads_draft, tp)
    if drafter_gib:
        # A drafter with its own checkpoint (EAGLE, DFlash, a draft model) is loaded in the
        # same profiled step: "Model loading took" counts both (gpu_model_runner.load_model).
        weights += int(drafter_gib * GIB / tp)
        source += " and the drafter's checkpoint"
    peak = activation_peak(model, tokens, seqs, tp)
    encoder, encoder_note = (
        (0, "") if language_only else encoder_peak(model, tokens, seqs, max_model_len, peak, rules)
    )
    peak += encoder
    non_torch = int(NON_TORCH_GB10_GIB * GIB)
    if not language_only:
        non_torch += encoder_host_bytes(model, tokens, seqs, max_model_len)
    cg = cudagraph_estimate(model, seqs, eager, tokens, num_spec)
    subtract = rules.cudagraph_subtracted(model, dict(env or {}), eager)
    error = None
    if rules.start_gate and free_gib is not None and free_gib * GIB < requested:
        error = START_GATE.format(free=free_gib, total=total_gib, util=utilization,
                                  requested=requested / GIB)  # fmt: skip
    if kv_cache_memory_bytes:
        available = int(kv_cache_memory_bytes)
    else:
        available = requested - weights - peak - non_torch - (cg if subtract else 0)
    return Budget(
        requested=requested, weights=weights, weights_source=source, activation_peak=peak,
        non_torch=non_torch, cudagraph_estimate=cg, cudagraph_subtracted=subtract,
        available_kv=available, error=error, notes=[encoder_note] if encoder_note else [],
    )  # fmt: skip
