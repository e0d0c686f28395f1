"""What the planner is asked about: the model's architecture, the recipe's vLLM flags and
the host (a stock DGX Spark unless told otherwise)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkdomain import spark


@dataclass(frozen=True)
class Architecture:
    total_params_b: float | None = None
    active_params_b: float | None = None  # None for a dense model
    weight_format: str = "bf16"
    weight_gb: float | None = None  # actual checkpoint size; beats params × bytes
    num_layers: int | None = None
    attention_layers: int | None = None  # layers that keep KV (full + sliding); None = all
    kv_heads: int | None = None
    head_dim: int | None = None
    kv_lora_rank: int | None = None  # MLA (DeepSeek): one compressed latent per token
    qk_rope_head_dim: int | None = None
    sliding_window_layers: int | None = None  # how many attention layers are sliding
    sliding_window: int | None = None
    recurrent_state_mib: float | None = None  # Mamba / linear-attention state per sequence
    checkpoint_kv_dtype: str = ""  # what kv_cache_dtype=auto becomes; "" = model dtype
    # All-reduces a layer pays under tensor parallelism: after the mixer and after the MLP,
    # plus what the model's own code adds (sparkdomain/planner/link.py).
    tp_allreduces_per_layer: int = 2

    @property
    def is_mla(self) -> bool:
        return bool(self.kv_lora_rank) and self.qk_rope_head_dim is not None

    @property
    def is_moe(self) -> bool:
        return (
            self.active_params_b is not None
            and self.total_params_b is not None
            and self.active_params_b < self.total_params_b
        )


@dataclass(frozen=True)
class Flags:
    gpu_memory_utilization: float
    max_model_len: int | None  # None: unknown (the model's own context, not given)
    max_num_seqs: int = 1
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1


@dataclass(frozen=True)
class HostSpec:
    physical_memory_gb: float = spark.PHYSICAL_MEMORY_GB
    cuda_visible_gib: float = spark.CUDA_VISIBLE_GIB
    bandwidth_gbs: float = spark.BANDWIDTH_GBS
    os_reserve_gb: float = spark.OS_RESERVE_GB
    cuda_context_gb: float = spark.CUDA_CONTEXT_GB
    cuda_graphs_gb: float = spark.CUDA_GRAPHS_GB
    freeze_margin_gb: float = spark.FREEZE_MARGIN_GB  # the guard's act line
    warn_margin_gb: float = spark.WATCHDOG_WARN_GB  # the guard's warn line
