"""Model profiles: what a model costs on a Spark, and how fast it runs there.

A profile couples the model's architecture (the planner's `Architecture`, so memory and
KV arithmetic come from one place) with the numbers that make timing realistic:

- `decode_efficiency`: the share of 273 GB/s a decode step achieves,
- `step_overhead_s`: a fixed cost per decode step (kernel launches, sampling, scheduling),
- `ttft_curve`: time to first token for one cold request, by prompt length (seconds),
  interpolated linearly and extended with the last segment's slope,
- `jit_seconds`: the one-off Inductor/FlashInfer compile on the first request,
- `load_gbps`: how fast weights load on a first start (10–15 minutes for the big models),
- `moe_batch_growth`: for MoE models, how much more weight a step reads per extra stream
  (different tokens route to different experts).

Calibration targets and results are in docs/sparksim.md.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace

from sparkdomain.planner import Architecture
from sparkdomain.presets import architecture_of


def _architecture(key: str) -> Architecture:
    """A reference model's architecture, from the one table the wizard also uses."""
    fields = architecture_of(key)
    fields.pop("model_id")
    return Architecture(**fields)


# vLLM's --quantization values and what they mean for bytes per weight.
QUANTIZATION_FORMATS = {
    "nvfp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "fp8": "fp8",
    "modelopt": "fp8",
    "mxfp4": "mxfp4",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
}


@dataclass(frozen=True)
class Profile:
    name: str
    label: str
    architecture: Architecture
    decode_efficiency: float
    step_overhead_s: float
    ttft_curve: tuple[tuple[int, float], ...]
    jit_seconds: float
    load_gbps: float = 0.1
    moe_batch_growth: float = 0.0
    architecture_name: str = "LlamaForCausalLM"
    # What a decode step reads, from the checkpoint vLLM loads (sparksim/decode.py); None:
    # the active weights and `moe_batch_growth` above.
    reads: object | None = None
    compile_seconds: float = 40.0
    graph_capture_seconds: float = 20.0

    def ttft(self, prompt_tokens: int) -> float:
        """Seconds from admission to the first token for one request alone, cold cache."""
        points = self.ttft_curve
        n = max(prompt_tokens, 0)
        if n <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if n <= x1:
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + (y1 - y0) * (n - x1) / (x1 - x0)

    def prefill_seconds(self, tokens: int) -> float:
        """Compute time of `tokens` prompt tokens, without the per-request fixed cost."""
        return max(self.ttft(tokens) - self.ttft(0), 0.0)

    @property
    def fixed_prefill_seconds(self) -> float:
        return self.ttft(0)


NEMOTRON_SUPER = Profile(
    name="nemotron-3-super",
    label="Nemotron-3-Super-120B-A12B (NVFP4)",
    architecture=_architecture("nemotron-3-super-120b-nvfp4"),
    # Seed 000: ~23.2 tok/s single stream → 43.1 ms per step: 7.14 GB at 80 % of 273 GB/s
    # is 32.7 ms, plus 10.4 ms of per-step overhead.
    decode_efficiency=0.80,
    step_overhead_s=0.0104,
    # Seed 000 TTFTs: 58 tok → 0.42 s, 1,834 → 1.12 s, 7,234 → 3.85 s.
    ttft_curve=((0, 0.400), (58, 0.420), (1834, 1.120), (7234, 3.845)),
    jit_seconds=25.0,
    moe_batch_growth=0.25,
    architecture_name="NemotronHForCausalLM",
)

QWEN35_35B = Profile(
    name="qwen3.5-35b-a3b",
    label="Qwen3.5-35B-A3B (NVFP4)",
    architecture=_architecture("qwen3.5-35b-a3b-nvfp4"),
    # Seed 004: 47-50 tok/s, TTFT about 0.12 s.
    decode_efficiency=0.80,
    step_overhead_s=0.0127,
    ttft_curve=((0, 0.105), (58, 0.120), (2048, 0.520), (8192, 1.900)),
    jit_seconds=12.0,
    moe_batch_growth=0.30,
    architecture_name="Qwen3_5MoeForConditionalGeneration",
)

QWEN35_122B = Profile(
    name="qwen3.5-122b-a10b",
    label="Qwen3.5-122B-A10B (NVFP4)",
    architecture=_architecture("qwen3.5-122b-a10b-nvfp4"),
    # Seed 004: ~30 tok/s.
    decode_efficiency=0.80,
    step_overhead_s=0.0076,
    ttft_curve=((0, 0.300), (58, 0.320), (2048, 1.300), (8192, 4.600)),
    jit_seconds=22.0,
    moe_batch_growth=0.25,
    architecture_name="Qwen3_5MoeForConditionalGeneration",
)

LLAMA_70B = Profile(
    name="llama-3.3-70b",
    label="Llama-3.3-70B (NVFP4, dense)",
    architecture=_architecture("llama-3.3-70b-nvfp4"),
    # Seed 004 claims 15-20 tok/s, above the 6.9 tok/s roofline of 39.7 GB per token; the
    # simulator follows physics: ~5.7 tok/s.
    decode_efficiency=0.85,
    step_overhead_s=0.005,
    ttft_curve=((0, 0.350), (58, 0.420), (2048, 2.600), (8192, 9.800)),
    jit_seconds=20.0,
)

QWEN3_32B = Profile(
    name="qwen3-32b",
    label="Qwen3-32B (dense)",
    architecture=_architecture("qwen3-32b-bf16"),
    # bf16 reads 65.6 GB per token (~3.5 tok/s); with --quantization awq (4.25 bits) about
    # 13 tok/s, inside the 9-44 tok/s seed 004 reports for 4-bit builds.
    decode_efficiency=0.85,
    step_overhead_s=0.006,
    ttft_curve=((0, 0.250), (58, 0.300), (2048, 1.500), (8192, 5.600)),
    jit_seconds=15.0,
    architecture_name="Qwen3ForCausalLM",
)

GPT_OSS_120B = Profile(
    name="gpt-oss-120b",
    label="gpt-oss-120b (MXFP4)",
    architecture=_architecture("gpt-oss-120b"),
    decode_efficiency=0.75,
    step_overhead_s=0.008,
    ttft_curve=((0, 0.150), (58, 0.180), (2048, 0.900), (8192, 3.000)),
    jit_seconds=15.0,
    moe_batch_growth=0.30,
    architecture_name="GptOssForCausalLM",
)

BUILTIN: dict[str, Profile] = {
    p.name: p for p in (NEMOTRON_SUPER, QWEN35_35B, QWEN35_122B, LLAMA_70B, QWEN3_32B, GPT_OSS_120B)
}

# Model ids are matched by these patterns (case-insensitive) when --profile is not given.
_MATCHERS = [
    (re.compile(r"nemotron-3-super|nemotron-h.*120b", re.I), NEMOTRON_SUPER),
    (re.compile(r"qwen3\.[56]-35b", re.I), QWEN35_35B),
    (re.compile(r"qwen3\.[56]-122b", re.I), QWEN35_122B),
    (re.compile(r"llama-3\.[13]-70b|70b", re.I), LLAMA_70B),
    (re.compile(r"qwen3-32b", re.I), QWEN3_32B),
    (re.compile(r"gpt-oss-120b", re.I), GPT_OSS_120B),
]
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


def generic_profile(model: str) -> Profile:
    """A dense model sized from its name ("...-8B-..."), 8B when the name says nothing."""
    match = _SIZE.search(model)
    size = float(match.group(1)) if match else 8.0
    layers = 32 if size <= 10 else 64 if size <= 40 else 80
    return Profile(
        name="generic",
        label=f"generic dense {size:g}B",
        architecture=Architecture(
            total_params_b=size, weight_format="bf16", num_layers=layers, kv_heads=8, head_dim=128
        ),
        decode_efficiency=0.80,
        step_overhead_s=0.006,
        ttft_curve=(
            (0, 0.100),
            (58, 0.110),
            (2048, 0.100 + 2048 * size / 40_000),
            (8192, 0.100 + 8192 * size / 36_000),
        ),
        jit_seconds=10.0,
    )


def resolve_profile(
    model: str, *, name: str | None = None, quantization: str | None = None
) -> Profile:
    """The profile for a model id (or an explicit --profile), with the weight format that
    --quantization implies."""
    if name:
        if name == "generic":
            profile = generic_profile(model)
        elif name in BUILTIN:
            profile = BUILTIN[name]
        else:
            raise ValueError(
                f"unknown profile {name!r}: choose one of {', '.join([*BUILTIN, 'generic'])}"
            )
    else:
        profile = next((p for pattern, p in _MATCHERS if pattern.search(model)), None)
        profile = profile or generic_profile(model)
    fmt = QUANTIZATION_FORMATS.get(quantization or "")
    if fmt and fmt != profile.architecture.weight_format:
        profile = replace(profile, architecture=replace(profile.architecture, weight_format=fmt))
    return profile
