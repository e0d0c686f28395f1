"""Published reference figures the results are shown next to (SPEC.md §4)."""

from __future__ import annotations

# The official vLLM-on-Spark evaluation: Nemotron-3-Super-120B-A12B-NVFP4, one Spark,
# vllm/vllm-openai:cu130-nightly, util 0.85, max-model-len 131072, max-num-seqs 4,
# single stream. (prompt, generated) -> (TTFT s, total s, prefill tok/s, decode tok/s).
SEED_MODEL = "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4"
SEED_SOURCE = "vLLM on Spark evaluation, Nemotron-3-Super NVFP4 (seed 000)"
SEED_TABLE: dict[tuple[int, int], dict[str, float]] = {
    (58, 2): {"ttft_s": 0.42, "e2e_s": 0.53, "prefill_tps": 140, "decode_tps": 23.0},
    # The seed's total (1.12 s) is inconsistent with its own decode rate; shown as published.
    (1834, 32): {"ttft_s": 1.12, "e2e_s": 1.12, "prefill_tps": 1636, "decode_tps": 23.7},
    (7234, 32): {"ttft_s": 3.85, "e2e_s": 5.26, "prefill_tps": 1877, "decode_tps": 22.7},
    (1834, 108): {"ttft_s": 1.12, "e2e_s": 5.74, "prefill_tps": 1639, "decode_tps": 23.4},
    (7234, 124): {"ttft_s": 3.84, "e2e_s": 9.26, "prefill_tps": 1884, "decode_tps": 22.9},
}

DEFAULT_SCENARIOS = [
    {"name": "typical judge call", "prompt_tokens": 58, "output_tokens": 2},
    {"name": "medium prompt, short gen", "prompt_tokens": 1834, "output_tokens": 32},
    {"name": "long prompt, short gen", "prompt_tokens": 7234, "output_tokens": 32},
    {"name": "medium prompt, long gen", "prompt_tokens": 1834, "output_tokens": 108},
    {"name": "long prompt, long gen", "prompt_tokens": 7234, "output_tokens": 124},
]


def seed_for(model_id: str, prompt_tokens: int, output_tokens: int) -> dict[str, float] | None:
    if model_id != SEED_MODEL:
        return None
    return SEED_TABLE.get((prompt_tokens, output_tokens))
