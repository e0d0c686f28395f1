"""Reference models, workloads and recipes from ../shared/SPEC.md §2. Pure data.

Architecture numbers come from the models' published config.json files (SPEC's table);
where a number is not known it is left out, and the planner says what it cannot compute.

Each model also names the parsers vLLM needs to serve its tool calls and reasoning (the
recipe's `tool_call_parser` and `reasoning_parser`; a tool-call parser adds
`--enable-auto-tool-choice` too, `sparkdomain/command.py`): without them vLLM answers a
chat request that carries `tools` — what every coding agent sends — with HTTP 400. The
names are ones vLLM 0.33 registers (tests/recipes/test_preset_parsers.py checks them against
its contract) and the model makers' published vLLM commands use (docs/recipes.md).
"""

from __future__ import annotations

from decimal import Decimal

from sparkdomain.spark import DEFAULT_IMAGE

# Model architectures the wizard offers in step 1 (SPEC §2, "Architecture facts").
MODELS: dict[str, dict] = {
    "nemotron-3-super-120b-nvfp4": {
        "label": "Nemotron-3-Super 120B-A12B (NVFP4, hybrid Mamba–Transformer MoE)",
        "model_id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "total_params_b": 120.6,
        "active_params_b": 12.7,
        "weight_format": "nvfp4",
        "num_layers": 88,
        "attention_layers": 8,
        "kv_heads": 2,
        "head_dim": 128,
        "recurrent_state_mib": 162.0,
        "checkpoint_kv_dtype": "fp8",
        "reasoning_parser": "nemotron_v3",
        "tool_call_parser": "qwen3_coder",
    },
    "qwen3.5-35b-a3b-nvfp4": {
        "label": "Qwen3.5-35B-A3B (NVFP4, linear-attention MoE)",
        "model_id": "nvidia/Qwen3.5-35B-A3B-NVFP4",
        "total_params_b": 35.0,
        "active_params_b": 3.0,
        "weight_format": "nvfp4",
        "num_layers": 40,
        "attention_layers": 10,
        "kv_heads": 2,
        "head_dim": 256,
        "recurrent_state_mib": 61.0,
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
    },
    "qwen3.5-122b-a10b-nvfp4": {
        "label": "Qwen3.5-122B-A10B (NVFP4, linear-attention MoE)",
        "model_id": "nvidia/Qwen3.5-122B-A10B-NVFP4",
        "total_params_b": 122.0,
        "active_params_b": 10.0,
        "weight_format": "nvfp4",
        "num_layers": 48,
        "attention_layers": 12,
        "kv_heads": 2,
        "head_dim": 256,
        "recurrent_state_mib": 147.0,
        "reasoning_parser": "qwen3",
        "tool_call_parser": "qwen3_coder",
    },
    "llama-3.3-70b-nvfp4": {
        "label": "Llama-3.3-70B-Instruct (NVFP4, dense)",
        "model_id": "nvidia/Llama-3.3-70B-Instruct-FP4",
        "total_params_b": 70.6,
        "weight_format": "nvfp4",
        "num_layers": 80,
        "kv_heads": 8,
        "head_dim": 128,
        "tool_call_parser": "llama3_json",
    },
    "qwen3-32b-bf16": {
        "label": "Qwen3-32B (BF16, dense)",
        "model_id": "Qwen/Qwen3-32B",
        "total_params_b": 32.8,
        "weight_format": "bf16",
        "num_layers": 64,
        "kv_heads": 8,
        "head_dim": 128,
        "reasoning_parser": "qwen3",
        "tool_call_parser": "hermes",
    },
    "gpt-oss-120b": {
        "label": "gpt-oss-120b (MXFP4 experts, sliding-window attention)",
        "model_id": "openai/gpt-oss-120b",
        "total_params_b": 117.0,
        "active_params_b": 5.1,
        "weight_format": "mxfp4",
        "num_layers": 36,
        "attention_layers": 36,
        "sliding_window_layers": 18,
        "sliding_window": 128,
        "kv_heads": 8,
        "head_dim": 64,
        "reasoning_parser": "openai_gptoss",
        "tool_call_parser": "openai",
    },
}

# The decision table (SPEC §2), offered in the wizard's workload step.
WORKLOADS: dict[str, dict] = {
    "35b-single-long": {
        "label": "35B MoE, single user, long context",
        "gpu_memory_utilization": Decimal("0.90"),
        "max_model_len": 32768,
        "max_num_seqs": 1,
        "kv_cache_dtype": "auto",
    },
    "35b-team-5": {
        "label": "35B MoE, 5 users, 8K context",
        "gpu_memory_utilization": Decimal("0.90"),
        "max_model_len": 8192,
        "max_num_seqs": 5,
        "kv_cache_dtype": "fp8",
    },
    "70b-single": {
        "label": "70B dense, single user",
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 8192,
        "max_num_seqs": 1,
        "kv_cache_dtype": "fp8",
    },
    "70b-team-5": {
        "label": "70B dense, 5 users",
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 4096,
        "max_num_seqs": 5,
        "kv_cache_dtype": "fp8",
    },
    "120b-single": {
        "label": "120B MoE, single user",
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 8192,
        "max_num_seqs": 1,
        "kv_cache_dtype": "fp8",
    },
}

_ARCH_KEYS = (
    "total_params_b", "active_params_b", "weight_format", "num_layers", "attention_layers",
    "kv_heads", "head_dim", "recurrent_state_mib", "checkpoint_kv_dtype",
    "sliding_window_layers", "sliding_window",
)  # fmt: skip


def architecture_of(model_key: str) -> dict:
    model = MODELS[model_key]
    return {k: model[k] for k in _ARCH_KEYS if k in model} | {"model_id": model["model_id"]}


def parsers_of(model_key: str) -> dict:
    """The model's reasoning and tool-call parsers, both keys always ("": none)."""
    model = MODELS[model_key]
    return {k: model.get(k, "") for k in ("reasoning_parser", "tool_call_parser")}


# The four reference recipes (SPEC §2), created by a data migration (0002; 0013 gave the
# rows of existing installs their parsers).
RECIPES: list[dict] = [
    {
        "name": "Nemotron-3-Super 120B — official vLLM Spark recipe",
        "slug": "nemotron-3-super-official",
        "description": (
            "The official vLLM-on-Spark evaluation recipe (seed 000): single stream, about "
            "23 tok/s decode, TTFT 0.42 s for a 58-token prompt, 1.1 s at 1,834 tokens and "
            "3.9 s at 7,234 tokens, measured with vllm/vllm-openai:cu130-nightly."
        ),
        **architecture_of("nemotron-3-super-120b-nvfp4"),
        **parsers_of("nemotron-3-super-120b-nvfp4"),
        "image": DEFAULT_IMAGE,
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 131072,
        "max_num_seqs": 4,
        "kv_cache_dtype": "auto",
    },
    {
        "name": "Qwen3.5-35B-A3B — max single-user throughput",
        "slug": "qwen3-5-35b-max-single-user",
        "description": (
            "Seed 004's fastest single-user setup: 47–50 tok/s decode and TTFT about 0.12 s "
            "reported with stock vLLM."
        ),
        **architecture_of("qwen3.5-35b-a3b-nvfp4"),
        **parsers_of("qwen3.5-35b-a3b-nvfp4"),
        "image": DEFAULT_IMAGE,
        "gpu_memory_utilization": Decimal("0.90"),
        "max_model_len": 32768,
        "max_num_seqs": 1,
        "enable_prefix_caching": True,
    },
    {
        "name": "70B dense — max concurrent users",
        "slug": "70b-dense-max-concurrent",
        "description": (
            "Seed 004's many-users setup for a dense 70B: short context, fp8 KV, up to 10 "
            "sequences. Its decode ceiling is about 7 tok/s per stream (39.7 GB of weights "
            "read per token at 273 GB/s), below the 15–20 tok/s the seed reports."
        ),
        **architecture_of("llama-3.3-70b-nvfp4"),
        **parsers_of("llama-3.3-70b-nvfp4"),
        "image": DEFAULT_IMAGE,
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 4096,
        "max_num_seqs": 10,
        "kv_cache_dtype": "fp8",
    },
    {
        "name": "120B MoE — safest large model",
        "slug": "120b-moe-safest",
        "description": (
            "Seed 004's most conservative setup for a 120B MoE: utilization 0.80, 8K context, "
            "one sequence, fp8 KV. (The seed's --swap-space 0 is today's behaviour: vLLM has "
            "had no CPU swap since 0.18.)"
        ),
        **architecture_of("nemotron-3-super-120b-nvfp4"),
        **parsers_of("nemotron-3-super-120b-nvfp4"),
        "image": DEFAULT_IMAGE,
        "gpu_memory_utilization": Decimal("0.80"),
        "max_model_len": 8192,
        "max_num_seqs": 1,
        "kv_cache_dtype": "fp8",
    },
]
