"""What the contract generator looks for in vLLM's source. Pure data, no imports.

``tools/vllm_contract.py`` runs inside a venv that has a given vLLM and no panel
dependencies, so this module must import nothing but the standard library.

LOG_LINES maps one id per log line the panel reads (the rules in ``logparse``) to a
regular expression that finds that line's format string in vLLM's source. The generator
stores every matching string with its file and line; ``tests/vllm_adapter`` renders each
stored format with sample values and checks that ``logparse`` still reads it. A needle
that finds nothing in a version is recorded as missing, which is itself a finding (the
line was reworded or removed).
"""

from __future__ import annotations

LOG_LINES: dict[str, str] = {
    # STARTING
    "server_version": r"^vLLM (?:API )?server version %s",
    # the logo that replaces it where the log has a formatter (string.Template: ${w} etc.)
    "server_version_logo": r"version \$\{w\}%s",
    "non_default_args": r"^non-default args: %s",
    "engine_init": r"^Initializing a V1 LLM engine \(v%s\)",
    "architecture": r"^Resolved architecture: %s",
    "max_model_len": r"^Using max model len %s",
    # LOADING
    "start_load": r"^Starting to load model %s",
    "drafter_load": r"^Loading drafter model",
    "weights_took": r"^Loading weights took %",
    "model_took": r"^Model loading took %s GiB",
    # COMPILING
    "compile_start": r"%sStarting torch\.compile$|^Warming up model for the compilation",
    "dynamo": r"Dynamo bytecode transform time: %",
    "compile_total": r"torch\.compile took %",
    "profiling": r"Initial profiling/warmup run took %",
    "kv_memory": r"^Available KV cache memory: %",
    "kv_size": r"KV cache size: %s tokens",
    "concurrency": r"Maximum concurrency for %s tokens per request: %",
    "graph_done": r"^Graph capturing finished in %",
    "init_engine": r"^init engine \(profile, create kv cache, warmup model\) took",
    # SERVING
    "server_start": r"^Starting vLLM (?:API )?server on %s",
    # FAILURES
    # the start-up check's two wordings, not the INFO hint "Free memory on device (...) on
    # startup. Desired GPU memory utilization is ..." that a healthy start may log
    "free_memory": r"^Free memory on device .{0,80}is less than",
    # "To serve at least one request with the model's max seq len ({}), ({} GiB KV cache is
    # needed, which is larger than the available KV cache memory ({} GiB). {}Try ..." where
    # the last {} is "Based on the available memory, the estimated maximum model length is
    # {}. " (v1/core/kv_cache_utils.py in 0.32, kv_cache_planning.py in 0.33); the older
    # "... larger than the maximum number of tokens that can be stored in KV cache ...".
    "kv_too_small": r"max seq len \(\{\}\).{0,80}larger than the available KV cache"
    r"|estimated maximum model length is \{\}"
    r"|larger than the maximum number of tokens that can be stored in KV cache",
    "no_cache_memory": r"No available memory for the cache blocks",
    # The weights meet CUDA's out-of-memory error while loading (gpu_model_runner.py's
    # load_model logs it as f"{msg} (original error: {e})" and re-raises).
    "load_oom": r"^Failed to load model - not enough GPU memory",
    "engine_failed": r"^Engine core initialization failed|^EngineCore failed to start",
    "engine_dead": r"EngineCore encountered an issue",
    # Tensor parallel over Ray (a pair of Sparks): a rank's death, the placement group that
    # never got its GPUs, TP above the node's GPUs without the Ray backend.
    "ray_rank_died": r"RayWorkerProc rank=%s died unexpectedly",
    "ray_no_gpus": r"Cannot provide a placement group requiring",
    "world_size_gpus": r"is larger than the number of available GPUs",
}

# Modules whose registries the generator reads (first import that works wins).
QUANTIZATION_MODULE = "vllm.model_executor.layers.quantization"
REASONING_MODULES = ("vllm.reasoning",)
TOOL_PARSER_MODULES = ("vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers")
