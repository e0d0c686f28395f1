"""Advice for flags and values a vLLM version refuses. Pure data and lookups.

Validity is never decided here — the contract (read from vLLM itself) decides what a
version accepts. This only says what to do instead, in the seeds' terms: the seeds' advice
stands, expressed in flags that exist.
"""

from __future__ import annotations

# Flags the seeds and older recipes use that today's vLLM no longer has.
REMOVED: dict[str, str] = {
    "--swap-space": (
        "--swap-space was removed in vLLM 0.18: there is no CPU swap any more (which is what "
        "the seeds' --swap-space 0 asked for on a Spark); delete it"
    ),
    "--task": (
        "--task is not a vllm serve option any more: for embedding, reranking or reward models "
        "use --runner pooling (with --convert embed/classify/reward to adapt a generative model)"
    ),
    "--num-scheduler-steps": "multi-step scheduling was removed with the V0 engine; delete it",
    "--use-v2-block-manager": "the V1 engine has one block manager; delete it",
    "--calculate-kv-scales": (
        "vLLM 0.32+ has no --calculate-kv-scales: fp8 KV scales come from the checkpoint "
        "(or default to 1.0); delete it"
    ),
    "--max-num-partial-prefills": (
        "vLLM 0.32+ has no --max-num-partial-prefills (the V1 scheduler chunks prefills "
        "itself); delete it"
    ),
}

VALUES: dict[tuple[str, str], str] = {
    ("--quantization", "nvfp4"): (
        "nvfp4 is not a vLLM quantization method: vLLM detects an NVFP4 checkpoint from its "
        "hf_quant_config.json / quantization_config by itself (method modelopt_fp4), so "
        'leave the quantization empty ("detected from the checkpoint")'
    ),
}


def for_flag(flag: str, version: str) -> str:
    text = REMOVED.get(flag, "")
    if text:
        return text
    if flag:
        return f"vLLM {version} has no option {flag}; check its spelling or delete it"
    return ""


def for_value(flag: str, value: str, version: str) -> str:
    text = VALUES.get((flag, value))
    if text:
        return text
    return f"give {flag} a value vLLM {version} accepts"
