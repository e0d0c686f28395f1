"""config.json import: the architecture numbers the planner needs, per model family.

The configs are trimmed copies of the published ones (only the keys the importer reads,
plus a few it must ignore); the expected values are SPEC §2's architecture table.
"""

from __future__ import annotations

import json

import pytest

from sparkdomain.hf_config import PARAMS_NOTE, ConfigImportError, parse_hf_config

NEMOTRON_PATTERN = ("ME" * 5 + "*") * 8  # 88 layers: 40 Mamba2, 40 MoE, 8 attention


def llama_3_3_70b() -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "rope_type": "llama3"},
        "torch_dtype": "bfloat16",
        "vocab_size": 128256,
    }


def nemotron_3_super() -> dict[str, object]:
    return {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 4096,
        "num_hidden_layers": 88,
        "hybrid_override_pattern": NEMOTRON_PATTERN,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "ssm_state_size": 128,
        "n_groups": 8,
        "conv_kernel": 4,
        "n_routed_experts": 512,
        "num_experts_per_tok": 22,
        "n_shared_experts": 1,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }


def qwen3_5_35b_a3b() -> dict[str, object]:
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "vision_config": {"depth": 27, "hidden_size": 1152},
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 2048,
            "num_hidden_layers": 40,
            "full_attention_interval": 4,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "linear_num_value_heads": 32,
            "linear_num_key_heads": 16,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "max_position_embeddings": 262144,
            "dtype": "bfloat16",
        },
    }


def gpt_oss_120b() -> dict[str, object]:
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "sliding_window": 128,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "num_local_experts": 128,
        "experts_per_token": 4,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": [
                "model.layers.*.self_attn",
                "model.layers.*.mlp.router",
                "model.embed_tokens",
                "lm_head",
            ],
        },
    }


def deepseek_v3() -> dict[str, object]:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "max_position_embeddings": 163840,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
        },
    }


NVFP4_HF_QUANT_CONFIG = {
    "producer": {"name": "modelopt", "version": "0.37.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16},
}


def test_llama_70b_derives_head_dim_from_hidden_size_and_reads_bf16() -> None:
    imported = parse_hf_config(llama_3_3_70b())

    assert imported.fields == {
        "num_layers": 80,
        "attention_layers": 80,
        "sliding_window_layers": 0,
        "sliding_window": 0,
        "kv_lora_rank": 0,
        "qk_rope_head_dim": 0,
        "kv_heads": 8,
        "head_dim": 128,
        "recurrent_state_mib": 0.0,
        "weight_format": "bf16",
        "quantization": "",
        "checkpoint_kv_dtype": "bf16",
    }
    assert imported.max_position_embeddings == 131072
    assert "head_dim derived as hidden_size / num_attention_heads = 8192 / 64 = 128." in (
        imported.notes
    )


def test_total_parameters_are_always_asked_for() -> None:
    imported = parse_hf_config(llama_3_3_70b())

    assert PARAMS_NOTE in imported.notes
    assert not any("Mixture of experts" in note for note in imported.notes)


def test_nemotron_hybrid_counts_only_the_star_layers_as_attention() -> None:
    imported = parse_hf_config(nemotron_3_super())

    assert imported.fields["num_layers"] == 88
    assert imported.fields["attention_layers"] == 8
    assert imported.fields["sliding_window_layers"] == 0
    assert imported.fields["kv_heads"] == 2
    assert imported.fields["head_dim"] == 128
    assert imported.max_position_embeddings == 262144


def test_nemotron_mamba2_state_is_162_mib_per_sequence() -> None:
    # 40 × 128 × 64 × 128 × 4 B (SSM) + 40 × 3 × (8192 + 2 × 8 × 128) × 2 B (conv)
    # = 167,772,160 + 2,457,600 B = 162.34 MiB (SPEC §2: ≈ 162 MiB).
    imported = parse_hf_config(nemotron_3_super())

    assert imported.fields["recurrent_state_mib"] == pytest.approx(162.34, abs=0.1)
    assert imported.fields["recurrent_state_mib"] == 162.34


def test_nemotron_hybrid_pattern_alone_gives_the_layer_count() -> None:
    config = nemotron_3_super()
    del config["num_hidden_layers"]

    assert parse_hf_config(config).fields["num_layers"] == 88


def test_modelopt_hf_quant_config_makes_nvfp4_weights_and_fp8_kv() -> None:
    imported = parse_hf_config(nemotron_3_super(), NVFP4_HF_QUANT_CONFIG)

    assert imported.fields["weight_format"] == "nvfp4"
    assert imported.fields["quantization"] == "nvfp4"
    assert imported.fields["checkpoint_kv_dtype"] == "fp8"


def test_nvfp4_with_excluded_modules_points_to_weight_gb() -> None:
    quant = {
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": ["lm_head", "backbone.layers.0.mixer*"],
        }
    }

    notes = parse_hf_config(nemotron_3_super(), json.dumps(quant)).notes

    mixed = [note for note in notes if note.startswith("Weights are mixed precision")]
    assert mixed == [
        "Weights are mixed precision (kept at higher precision: lm_head, "
        "backbone.layers.0.mixer*): parameters × bytes per parameter underestimates them; "
        "the actual size in GB (weight_gb) is the better input."
    ]


def test_moe_config_gets_a_note_with_the_expert_counts() -> None:
    notes = parse_hf_config(nemotron_3_super()).notes

    assert (
        "Mixture of experts: 512 routed experts, 22 used per token, plus 1 shared. Active "
        "parameters are not in config.json either: enter them too (they set the decode speed "
        "estimate)."
    ) in notes


def test_qwen35_reads_text_config_and_every_fourth_layer_is_attention() -> None:
    imported = parse_hf_config(qwen3_5_35b_a3b())

    assert imported.fields["num_layers"] == 40
    assert imported.fields["attention_layers"] == 10
    assert imported.fields["kv_heads"] == 2
    assert imported.fields["head_dim"] == 256
    assert imported.fields["weight_format"] == "bf16"
    assert imported.max_position_embeddings == 262144
    assert any("'text_config'" in note for note in imported.notes)


def test_qwen35_gated_deltanet_state_is_61_mib_per_sequence() -> None:
    # 30 × 32 × 128 × 128 × 4 B (SSM) + 30 × 3 × (2 × 16 × 128 + 32 × 128) × 2 B (conv)
    # = 62,914,560 + 1,474,560 B = 61.41 MiB (SPEC §2: ≈ 61 MiB).
    state = parse_hf_config(qwen3_5_35b_a3b()).fields["recurrent_state_mib"]

    assert state == pytest.approx(61.4, abs=0.1)
    assert state == 61.41


def test_top_level_quantization_config_applies_to_a_nested_text_config() -> None:
    config = qwen3_5_35b_a3b()
    config["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": "FP8",
    }

    fields = parse_hf_config(config).fields

    assert (fields["weight_format"], fields["quantization"], fields["checkpoint_kv_dtype"]) == (
        "nvfp4",
        "nvfp4",
        "fp8",
    )


def test_gpt_oss_layer_types_give_sliding_and_full_attention_and_mxfp4() -> None:
    imported = parse_hf_config(gpt_oss_120b())

    assert imported.fields == {
        "num_layers": 36,
        "attention_layers": 36,
        "sliding_window_layers": 18,
        "sliding_window": 128,
        "kv_lora_rank": 0,
        "qk_rope_head_dim": 0,
        "kv_heads": 8,
        "head_dim": 64,
        "recurrent_state_mib": 0.0,
        "weight_format": "mxfp4",
        "quantization": "mxfp4",
        "checkpoint_kv_dtype": "bf16",
    }
    assert any(note.startswith("Weights are mixed precision") for note in imported.notes)


def test_linear_attention_layer_types_are_not_attention_layers() -> None:
    config = qwen3_5_35b_a3b()["text_config"]
    del config["full_attention_interval"]
    config["layer_types"] = ["linear_attention"] * 3 + ["full_attention"]
    config["layer_types"] *= 10

    fields = parse_hf_config(config).fields

    assert (fields["attention_layers"], fields["recurrent_state_mib"]) == (10, 61.41)


def test_deepseek_v3_mla_sets_latent_sizes_and_fp8_weights() -> None:
    imported = parse_hf_config(deepseek_v3())

    assert imported.fields == {
        "num_layers": 61,
        "attention_layers": 61,
        "sliding_window_layers": 0,
        "sliding_window": 0,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "kv_heads": 128,
        "recurrent_state_mib": 0.0,
        "weight_format": "fp8",
        "quantization": "fp8",
        "checkpoint_kv_dtype": "bf16",
    }
    # hidden / heads = 56 would be a wrong head_dim for MLA, so none is derived.
    assert "head_dim" not in imported.fields


def test_awq_checkpoint_is_int4_with_awq_quantization() -> None:
    config = llama_3_3_70b()
    config["torch_dtype"] = "float16"
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128}

    fields = parse_hf_config(config).fields

    assert (fields["weight_format"], fields["quantization"], fields["checkpoint_kv_dtype"]) == (
        "int4",
        "awq",
        "fp16",
    )


def test_compressed_tensors_fp8_with_fp8_kv_scheme() -> None:
    config = llama_3_3_70b()
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
        "kv_cache_scheme": {"num_bits": 8, "type": "float"},
    }

    fields = parse_hf_config(config).fields

    assert (fields["weight_format"], fields["quantization"], fields["checkpoint_kv_dtype"]) == (
        "fp8",
        "compressed-tensors",
        "fp8",
    )


def test_without_num_key_value_heads_kv_heads_equal_attention_heads() -> None:
    config = llama_3_3_70b()
    del config["num_key_value_heads"]

    imported = parse_hf_config(config)

    assert imported.fields["kv_heads"] == 64
    assert any(
        note.startswith("No GQA: KV heads = attention heads (64)") for note in imported.notes
    )


def test_sliding_window_without_use_sliding_window_counts_every_layer_as_full() -> None:
    config = llama_3_3_70b()
    config["sliding_window"] = 4096

    imported = parse_hf_config(config)

    assert (imported.fields["sliding_window_layers"], imported.fields["sliding_window"]) == (0, 0)
    assert any("sliding_window (4096)" in note for note in imported.notes)


def test_use_sliding_window_makes_every_layer_sliding() -> None:
    config = llama_3_3_70b()
    config.update(sliding_window=4096, use_sliding_window=True)

    fields = parse_hf_config(config).fields

    assert (fields["attention_layers"], fields["sliding_window_layers"]) == (80, 80)
    assert fields["sliding_window"] == 4096


def test_malformed_json_error_names_the_line() -> None:
    text = '{\n  "num_hidden_layers": 80,\n  "hidden_size": 8192\n  "torch_dtype": "bf16"\n}'

    with pytest.raises(ConfigImportError) as caught:
        parse_hf_config(text)

    assert str(caught.value) == (
        "config.json is not valid JSON: Expecting ',' delimiter (line 4, column 3)"
    )


def test_malformed_quant_config_is_named_as_such() -> None:
    with pytest.raises(ConfigImportError, match=r"^hf_quant_config\.json is not valid JSON"):
        parse_hf_config(llama_3_3_70b(), "{nope")


def test_json_array_is_refused() -> None:
    with pytest.raises(ConfigImportError) as caught:
        parse_hf_config("[1, 2, 3]")

    assert str(caught.value) == "config.json must be a JSON object ({...}), but it is a list."


def test_config_without_a_layer_count_names_num_hidden_layers() -> None:
    config = llama_3_3_70b()
    del config["num_hidden_layers"]

    with pytest.raises(ConfigImportError) as caught:
        parse_hf_config(config)

    assert str(caught.value) == (
        "config.json has no layer count: expected 'num_hidden_layers' "
        "(or 'n_layer' / 'num_layers')."
    )


def test_a_non_numeric_layer_count_is_an_error() -> None:
    config = llama_3_3_70b()
    config["num_hidden_layers"] = "eighty"

    with pytest.raises(ConfigImportError, match=r"'num_hidden_layers' in config\.json must be"):
        parse_hf_config(config)


def test_bytes_input_with_a_byte_order_mark_is_read() -> None:
    data = b"\xef\xbb\xbf" + json.dumps(llama_3_3_70b()).encode()

    imported = parse_hf_config(data)

    assert (imported.fields["num_layers"], imported.fields["head_dim"]) == (80, 128)


def test_text_input_gives_the_same_result_as_a_dict() -> None:
    assert parse_hf_config(json.dumps(gpt_oss_120b())) == parse_hf_config(gpt_oss_120b())
