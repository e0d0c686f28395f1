"""Which accounting rule a vLLM version follows, read from each release's source (the wheels
of 0.12 → 0.34; the file each rule lives in is named beside it). A version is compared by
its numbers (0.23.1rc1.dev… is 0.23.1); versions newer than the newest row follow it.

| since  | change (file in that release)                                                     |
|--------|-----------------------------------------------------------------------------------|
| 0.14.0 | start gate `free < ceil(total × util)` (v1/worker/utils.py request_memory); the   |
|        | fit check counts the first KV group only (v1/core/kv_cache_utils.py)               |
| 0.15.0 | mamba_cache_mode; a state group needs 1 + speculative blocks per request           |
| 0.16.0 | prefix caching on a hybrid: mamba mode 'all' for the Mamba2 family, else 'align'   |
|        | (model_executor/models/config.py MambaModelConfig)                                 |
| 0.18.0 | CUDA-graph estimate (gpu_model_runner.py profile_cudagraph_memory), subtracted     |
|        | only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; group padding at 1.5× not 1.25× |
| 0.19.0 | the fit check sums every group                                                     |
| 0.20.0 | the estimate is subtracted by default (V1 runner); utilization default 0.9 → 0.92  |
| 0.20.1 | "GPU KV cache size" = int(max_concurrency × max_model_len) (was blocks // groups ×  |
|        | block size)                                                                        |
| 0.22.0 | the V2 model runner (no graph estimate until 0.29) is the default for some models  |
| 0.26.0 | prefix caching on by default for hybrids; sliding windows keep 2 × batched tokens  |
|        | in flight (async scheduling)                                                       |
| 0.28.0 | mamba mode 'align' for every hybrid                                                |
| 0.29.0 | the V2 runner estimates graphs too and is the default; the fit check holds back the |
|        | null block; a Mamba2 state keeps a prefill checkpoint block in 'align' mode        |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_adapter.startup.kv import Layout
    from vllm_adapter.startup.model import TextModel

# Hybrids whose model class supports Mamba prefix caching in 'all' mode (0.16–0.27).
MAMBA2_FAMILY = ("NemotronH", "Jamba", "FalconH1", "GraniteMoeHybrid", "Zamba2", "Mamba")


def version_key(version: str) -> tuple[int, ...]:
    parts = []
    for piece in str(version).split(".")[:3]:
        digits = ""
        for c in piece:
            if not c.isdigit():
                break
            digits += c
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


@dataclass(frozen=True)
class Rules:
    version: str
    key: tuple[int, ...] = (0, 33, 0)

    def at_least(self, version: str) -> bool:
        return self.key >= version_key(version)

    # --- defaults -------------------------------------------------------------------------
    @property
    def default_utilization(self) -> float:
        return 0.92 if self.at_least("0.20.0") else 0.9

    # `vllm serve` on a GB10: the small tier in every version (NVML has no memory figure
    # for an integrated part, so older versions saw 0 bytes; 0.33 names the GB10).
    default_batched_tokens: int = 2048
    default_max_num_seqs: int = 256
    kernel_block_alignment: int = 16  # FLASH_ATTN's smallest kernel block
    start_gate: bool = True

    @property
    def gate_rounds_up(self) -> bool:
        return self.at_least("0.14.0")

    # --- CUDA graphs ----------------------------------------------------------------------
    def uses_v2_runner(self, model: TextModel, env: dict) -> bool:
        """The V2 model runner's defaults (v1/worker/gpu_worker.py, by release)."""
        forced = env.get("VLLM_USE_V2_MODEL_RUNNER")
        if forced in ("0", "1"):
            return forced == "1"
        quantized = bool(model.quantization)
        if self.at_least("0.29.0"):
            return True
        if self.at_least("0.25.0"):
            return not model.is_moe and not model.is_hybrid
        if self.at_least("0.23.0"):
            return model.architecture in (
                "LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"
            ) and not quantized  # fmt: skip
        return (
            self.at_least("0.22.0") and model.architecture == "Qwen3ForCausalLM" and not quantized
        )

    def cudagraph_subtracted(self, model: TextModel, env: dict, eager: bool) -> bool:
        if eager or not self.at_least("0.18.0"):
            return False
        flag = env.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS")
        default_on = self.at_least("0.20.0")
        if (flag == "0") or (flag is None and not default_on):
            return False
        # The V2 runner's estimate is 0 until 0.29.
        return self.at_least("0.29.0") or not self.uses_v2_runner(model, env)

    # --- hybrids ----------------------------------------------------------------------------
    def prefix_caching_default(self, hybrid: bool) -> bool:
        return self.at_least("0.26.0") if hybrid else True

    def mamba_mode(self, model: TextModel, prefix: bool) -> str:
        if not prefix or not self.at_least("0.16.0"):
            return "none"
        if not self.at_least("0.28.0") and model.architecture.startswith(MAMBA2_FAMILY):
            return "all"
        return "align"

    @property
    def spec_adds_state_blocks(self) -> bool:
        return self.at_least("0.15.0")

    @property
    def mamba2_checkpoint_block(self) -> bool:
        return self.at_least("0.29.0")

    @property
    def group_padding_ratio(self) -> float:
        return 1.5 if self.at_least("0.18.0") else 1.25

    def in_flight_factor(self, async_scheduling: bool, pp: int) -> int:
        if self.at_least("0.26.0") and async_scheduling:
            return pp + 1
        return 1

    # --- the fit check and the capacity line ------------------------------------------------
    @property
    def fit_counts(self) -> str:
        if self.at_least("0.19.0"):
            return "all groups"
        if self.at_least("0.14.0"):
            return "first group"
        return "all layers"

    @property
    def holds_null_block(self) -> bool:
        return self.at_least("0.29.0")

    def kv_tokens(self, num_blocks: int, concurrency: float, max_model_len: int,
                  lay: Layout) -> int:  # fmt: skip
        if self.at_least("0.20.1"):
            return int(concurrency * max_model_len)
        groups = max(len(lay.groups), 1)
        return (num_blocks // groups) * lay.block_size


def rules_for(version: str) -> Rules:
    return Rules(version=version, key=version_key(version))
