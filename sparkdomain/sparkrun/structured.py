"""The `vllm serve` command sparkrun 0.4 builds from a recipe's `defaults` when the recipe
has no `command:` (sparkrun/runtimes/_vllm_common.py::_build_base_command with
runtimes/base.py::build_flags_from_map): the model, `--revision` when the recipe pins one,
`-tp`, then one flag per key of its `VLLM_FLAG_MAP`, in that map's order. A key outside the
map is not passed to vLLM by sparkrun (it warns and drops it), so it is not imported
either; a boolean key gives `--flag` when true and, for the few vLLM turns on by default,
`--no-flag` when false; a mapping or list is one JSON argument."""

from __future__ import annotations

import json
from collections.abc import Mapping

# sparkrun 0.4.2's VLLM_FLAG_MAP, in emission order (key → vLLM flag).
VLLM_FLAG_MAP: tuple[tuple[str, str], ...] = (
    ("port", "--port"), ("host", "--host"), ("tensor_parallel", "-tp"),
    ("gpu_memory_utilization", "--gpu-memory-utilization"), ("max_model_len", "--max-model-len"),
    ("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
    ("served_model_name", "--served-model-name"), ("dtype", "--dtype"),
    ("quantization", "--quantization"), ("enforce_eager", "--enforce-eager"),
    ("enable_prefix_caching", "--enable-prefix-caching"),
    ("trust_remote_code", "--trust-remote-code"),
    ("distributed_executor_backend", "--distributed-executor-backend"),
    ("pipeline_parallel", "-pp"), ("data_parallel", "--data-parallel-size"),
    ("kv_cache_dtype", "--kv-cache-dtype"), ("otlp_traces_endpoint", "--otlp-traces-endpoint"),
    ("api_key", "--api-key"), ("attention_backend", "--attention-backend"),
    ("load_format", "--load-format"), ("reasoning_parser", "--reasoning-parser"),
    ("tool_call_parser", "--tool-call-parser"), ("chat_template", "--chat-template"),
    ("speculative_config", "--speculative-config"), ("tokenizer_mode", "--tokenizer-mode"),
    ("mm_encoder_tp_mode", "--mm-encoder-tp-mode"), ("block_size", "--block-size"),
    ("seed", "--seed"), ("enable_auto_tool_choice", "--enable-auto-tool-choice"),
    ("enable_chunked_prefill", "--enable-chunked-prefill"),
    ("async_scheduling", "--async-scheduling"), ("generation_config", "--generation-config"),
    ("hf_overrides", "--hf-overrides"), ("compilation_config", "--compilation-config"),
    ("attention_config", "--attention-config"),
    ("model_loader_extra_config", "--model-loader-extra-config"),
    ("default_chat_template_kwargs", "--default-chat-template-kwargs"),
    ("limit_mm_per_prompt", "--limit-mm-per-prompt"),
    ("mm_processor_cache_gb", "--mm-processor-cache-gb"),
    ("kv_cache_memory_bytes", "--kv-cache-memory-bytes"),
    ("max_cudagraph_capture_size", "--max-cudagraph-capture-size"),
    ("long_prefill_token_threshold", "--long-prefill-token-threshold"),
    ("mamba_cache_mode", "--mamba-cache-mode"), ("mamba_cache_dtype", "--mamba-cache-dtype"),
    ("mamba_ssm_cache_dtype", "--mamba-ssm-cache-dtype"),
    ("reasoning_parser_plugin", "--reasoning-parser-plugin"),
    ("media_io_kwargs", "--media-io-kwargs"), ("video_pruning_rate", "--video-pruning-rate"),
    ("allowed_local_media_path", "--allowed-local-media-path"),
    ("prefix_match_unit", "--prefix-match-unit"),
    ("enable_mamba_shared_prefix_checkpoint", "--enable-mamba-shared-prefix-checkpoint"),
    ("safetensors_load_strategy", "--safetensors-load-strategy"),
    ("moe_backend", "--moe-backend"),
    ("enable_prompt_tokens_details", "--enable-prompt-tokens-details"),
    ("enable_force_include_usage", "--enable-force-include-usage"),
    ("enable_request_id_headers", "--enable-request-id-headers"),
    ("enable_flashinfer_autotune", "--enable-flashinfer-autotune"),
    ("linear_backend", "--linear-backend"), ("gdn_prefill_backend", "--gdn-prefill-backend"),
    ("gdn_decode_kernel", "--gdn-decode-kernel"), ("kda_prefill_backend", "--kda-prefill-backend"),
    ("mamba_backend", "--mamba-backend"),
    ("recurrent_checkpoint_policy", "--recurrent-checkpoint-policy"),
    ("prefix_cache_retention_interval", "--prefix-cache-retention-interval"),
    ("engram_config", "--engram-config"), ("dcp_comm_backend", "--dcp-comm-backend"),
    ("prefill_policy", "--prefill-policy"), ("prefill_compute_share", "--prefill-compute-share"),
    ("prefill_compute_half_life", "--prefill-compute-half-life"),
    ("prefill_schedule_interval", "--prefill-schedule-interval"),
    ("max_parallel_prefills", "--max-parallel-prefills"),
    ("decode_refill_target", "--decode-refill-target"),
    ("scheduler_reserve_full_isl", "--scheduler-reserve-full-isl"),
    ("jit_monitor_mode", "--jit-monitor-mode"),
    ("disable_custom_all_reduce", "--disable-custom-all-reduce"),
)  # fmt: skip
FLAG_OF_KEY = dict(VLLM_FLAG_MAP)
BOOL_KEYS = frozenset({
    "enforce_eager", "enable_prefix_caching", "trust_remote_code", "enable_auto_tool_choice",
    "enable_chunked_prefill", "async_scheduling", "enable_prompt_tokens_details",
    "enable_force_include_usage", "enable_request_id_headers", "enable_flashinfer_autotune",
    "scheduler_reserve_full_isl", "disable_custom_all_reduce",
    "enable_mamba_shared_prefix_checkpoint",
})  # fmt: skip
NEGATABLE_KEYS = frozenset({
    "enable_prefix_caching", "enable_chunked_prefill", "async_scheduling",
    "enable_flashinfer_autotune", "scheduler_reserve_full_isl",
})  # fmt: skip
_SKIPPED = {"tensor_parallel", "distributed_executor_backend"}
# Keys sparkrun reads for itself, never flags (scheduling, placeholders, its own wiring).
CONSUMED_KEYS = frozenset({
    "model", "model_revision", "resolved_model_path", "expert_parallel", "context_parallel",
    "data_parallel_rpc_port",
})  # fmt: skip


def truthy(value: object) -> bool:
    """scitrera_app_framework's ext_parse_bool, as sparkrun reads a boolean key."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "yes", "1", "on", "y", "t"}


def flag_value(value: object) -> str:
    """sparkrun's render_flag_value, without the shell quoting (an argv element)."""
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        return value.strip()
    return str(value)


def structured_argv(model: str, revision: str, config: Mapping[str, object]) -> list[str]:
    """`vllm serve ...` as sparkrun builds it from `config` (the recipe's defaults)."""
    argv = ["vllm", "serve", model]
    if revision:
        argv += ["--revision", revision]
    tp = config.get("tensor_parallel")
    if tp:
        argv += ["-tp", str(tp)]
    for key, flag in VLLM_FLAG_MAP:
        if key in _SKIPPED:
            continue
        value = config.get(key)
        if value is None:
            continue
        if key in BOOL_KEYS:
            if truthy(value):
                argv.append(flag)
            elif key in NEGATABLE_KEYS:
                argv.append("--no-" + flag[2:])
            continue
        argv += [flag, flag_value(value)]
    return argv


def unmapped_keys(config: Mapping[str, object]) -> list[str]:
    """The defaults sparkrun does not pass to vLLM without a command (outside its map)."""
    return [
        k for k in config
        if k not in FLAG_OF_KEY and k not in CONSUMED_KEYS and not k.startswith(("_", "env."))
    ]  # fmt: skip
