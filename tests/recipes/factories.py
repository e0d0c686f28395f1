from decimal import Decimal

from apps.recipes.models import Recipe


def recipe_data(**overrides) -> dict:
    """Valid form data for a small dense model; override what a test is about."""
    data = {
        "name": "Test recipe",
        "slug": "",
        "description": "",
        "model_id": "Qwen/Qwen3-32B",
        "served_model_name": "",
        "image": "vllm/vllm-openai:cu130-nightly",
        "gpu_memory_utilization": "0.85",
        "max_model_len": "8192",
        "max_num_seqs": "4",
        "kv_cache_dtype": "fp8",
        "quantization": "",
        "enable_prefix_caching": "true",
        "max_num_batched_tokens": "",
        "tensor_parallel_size": "1",
        "reasoning_parser": "",
        "tool_call_parser": "",
        "extra_args": "",
        "total_params_b": "32.8",
        "active_params_b": "",
        "weight_format": "bf16",
        "weight_gb": "",
        "num_layers": "64",
        "attention_layers": "",
        "kv_heads": "8",
        "head_dim": "128",
        "kv_lora_rank": "",
        "qk_rope_head_dim": "",
        "sliding_window_layers": "",
        "sliding_window": "",
        "recurrent_state_mib": "",
        "checkpoint_kv_dtype": "",
    }
    data.update(overrides)
    return data


def make_recipe(**overrides) -> Recipe:
    values = {
        "name": "Factory recipe",
        "model_id": "Qwen/Qwen3-32B",
        "gpu_memory_utilization": Decimal("0.85"),
        "max_model_len": 8192,
        "max_num_seqs": 4,
        "kv_cache_dtype": "fp8",
        "total_params_b": 32.8,
        "weight_format": "bf16",
        "num_layers": 64,
        "kv_heads": 8,
        "head_dim": 128,
    }
    values.update(overrides)
    recipe = Recipe(**values)
    recipe.full_clean()
    recipe.save()
    return recipe
