"""config.json of the models the tests and `make bench` run (Django-free, shared): the
architecture fields of the published configs, trimmed to what vLLM's start-up and decode
models read."""

from __future__ import annotations

import json
from pathlib import Path

# Qwen3.6-35B-A3B's text config (public config.json, trimmed to what vLLM reads).
QWEN36_MOE = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text", "dtype": "bfloat16", "num_hidden_layers": 40,
        "full_attention_interval": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
        "head_dim": 256, "hidden_size": 2048, "num_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
        "linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1, "max_position_embeddings": 262144, "vocab_size": 248320,
    },
    "vision_config": {"depth": 27},
}  # fmt: skip

# Qwen3.6-27B (dense hybrid).
QWEN36_DENSE = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
    "text_config": {**QWEN36_MOE["text_config"], "model_type": "qwen3_5_text",
                    "num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
                    "hidden_size": 5120, "intermediate_size": 17408, "num_experts": 0,
                    "linear_num_value_heads": 48},
}  # fmt: skip

# NVIDIA-Nemotron-3-Nano-30B-A3B (Mamba2 hybrid).
NEMOTRON_NANO = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "vocab_size": 131072, "hidden_size": 2688, "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 2,
    "max_position_embeddings": 262144, "ssm_state_size": 128, "mamba_num_heads": 64,
    "n_groups": 8, "mamba_head_dim": 64, "conv_kernel": 4, "n_routed_experts": 128,
    "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "mlp_hidden_act": "relu2",
}  # fmt: skip

QWEN3_SMALL = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 1024,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
    "vocab_size": 151936, "tie_word_embeddings": True,
}  # fmt: skip

GEMMA4_26B = {
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "text_config": {
        "hidden_size": 2816, "num_hidden_layers": 30, "num_attention_heads": 16,
        "num_key_value_heads": 8, "num_global_key_value_heads": 2, "head_dim": 256,
        "global_head_dim": 512, "intermediate_size": 2112, "moe_intermediate_size": 704,
        "num_experts": 128, "top_k_experts": 8, "sliding_window": 1024, "vocab_size": 262144,
        "max_position_embeddings": 262144, "attention_k_eq_v": True, "torch_dtype": "bfloat16",
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
    },
}  # fmt: skip

LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "intermediate_size": 28672, "vocab_size": 128256, "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}  # fmt: skip

MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}  # fmt: skip

GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
    "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
    "num_experts_per_tok": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
    "sliding_window": 128, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
}  # fmt: skip


def hf_cache(hub: Path, repo_id: str, config: dict, total_size: int,
             quant_config: dict | None = None) -> dict[str, str]:  # fmt: skip
    """A Hugging Face hub cache at `hub` holding only what vLLM reads before loading:
    config.json, the safetensors index (its metadata.total_size) and ModelOpt's
    hf_quant_config.json when given — no weights. Returns the environment that points a
    server at it, offline."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    commit = "c" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    index = {"metadata": {"total_size": total_size}, "weight_map": {}}
    (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    if quant_config:
        (snapshot / "hf_quant_config.json").write_text(json.dumps(quant_config))
    return {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
