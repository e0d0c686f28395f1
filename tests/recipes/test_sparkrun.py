"""sparkrun recipe import: every field mapped, every problem reported against its key.

The recipes follow sparkrun's documented format (RECIPES.md in scitrera/sparkrun) and
are parsed with PyYAML exactly as an upload would be.
"""

from __future__ import annotations

import pytest
import yaml

from sparkdomain.sparkrun import (
    SparkrunImportError,
    SparkrunRecipe,
    looks_like_sparkrun,
    parse_sparkrun,
)

FULL_RECIPE = """
model: nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4
runtime: vllm
container: vllm/vllm-openai:cu130-nightly
name: nemotron-super-spark
description: Official vLLM Spark recipe
metadata:
  maintainer: someone <someone@example.com>
  model_params: 120B
  active_params: 12B
  model_dtype: nvfp4
  kv_dtype: fp8
  num_layers: 88
  attention_layers: 8
  num_kv_heads: 2
  head_dim: 128
  quantization: nvfp4
  model_vram: 74.5
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 1
  gpu_memory_utilization: 0.85
  max_model_len: 131072
  max_num_seqs: 4
  kv_cache_dtype: fp8
  served_model_name: nemotron-super
  max_num_batched_tokens: 8192
  enable_prefix_caching: true
  enforce_eager: false
  swap_space: 0
"""

# sparkrun's own bundled recipe, flags partly written straight into the command.
NEMOTRON_NANO_RECIPE = """
model: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4
runtime: vllm
min_nodes: 1
container: scitrera/dgx-spark-vllm:0.16.0-t5
metadata:
  description: NVIDIA Nemotron 3 Nano 30B (upstream NVFP4) -- cluster or solo
  maintainer: scitrera.ai <open-source-team@scitrera.com>
  model_params: 30B
  model_dtype: nvfp4
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 1
  gpu_memory_utilization: 0.8
  max_model_len: 200000
  served_model_name: nemotron3-30b-a3b
  tool_call_parser: qwen3_coder
env:
  VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"
command: |
  vllm serve \\
      {model} \\
      --served-model-name {served_model_name} \\
      --max-model-len {max_model_len} \\
      --gpu-memory-utilization {gpu_memory_utilization} \\
      -tp {tensor_parallel} \\
      --host {host} \\
      --port {port} \\
      --max-num-seqs 4 \\
      --kv-cache-dtype fp8 \\
      --enable-prefix-caching \\
      --enable-auto-tool-choice \\
      --tool-call-parser {tool_call_parser} \\
      --trust-remote-code
"""


def parse(text: str, **kwargs: str) -> SparkrunRecipe:
    return parse_sparkrun(yaml.safe_load(text), **kwargs)


def minimal(**extra: object) -> dict[str, object]:
    return {"model": "Qwen/Qwen3-32B", "runtime": "vllm", **extra}


def test_full_recipe_maps_every_field() -> None:
    recipe = parse(FULL_RECIPE)

    assert recipe.errors == {}
    assert recipe.fields == {
        "name": "nemotron-super-spark",
        "model_id": "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4",
        "image": "vllm/vllm-openai:cu130-nightly",
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": "0.85",
        "max_model_len": 131072,
        "max_num_seqs": 4,
        "kv_cache_dtype": "fp8",
        "served_model_name": "nemotron-super",
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": True,
        "enforce_eager": False,
        "total_params_b": 120.0,
        "active_params_b": 12.0,
        "weight_format": "nvfp4",
        "checkpoint_kv_dtype": "fp8",
        "num_layers": 88,
        "attention_layers": 8,
        "kv_heads": 2,
        "head_dim": 128,
        # metadata says the checkpoint is NVFP4: vLLM detects that itself, so no flag.
        "quantization": "",
        "weight_gb": 74.5,
    }
    assert recipe.description == "Official vLLM Spark recipe"


def test_port_and_host_are_reported_as_ignored() -> None:
    recipe = parse(FULL_RECIPE)

    assert recipe.ignored == [
        "defaults.port (8000): SparkPanel chooses the port of each run itself.",
        "defaults.host (0.0.0.0): SparkPanel chooses the address the server listens on itself.",
        "defaults.swap_space (0 (int)): not carried over — --swap-space was removed in vLLM "
        "0.18: there is no CPU swap any more (which is what the seeds' --swap-space 0 asked "
        "for on a Spark); delete it",
        "metadata.maintainer (someone <someone@example.com>): who maintains the sparkrun "
        "recipe; not imported.",
    ]


def test_gpu_memory_utilization_stays_text_and_is_not_capped_here() -> None:
    recipe = parse_sparkrun(minimal(defaults={"gpu_memory_utilization": 0.95}))

    assert recipe.fields["gpu_memory_utilization"] == "0.95"
    assert recipe.errors == {}


def test_gpu_memory_utilization_that_is_not_a_number_is_an_error() -> None:
    recipe = parse_sparkrun(minimal(defaults={"gpu_memory_utilization": "high"}))

    assert recipe.errors == {
        "defaults.gpu_memory_utilization": ["expected a number such as 0.85, got 'high'"]
    }
    assert "gpu_memory_utilization" not in recipe.fields


@pytest.mark.parametrize(
    ("written", "billions"),
    [
        ("120B", 120.0),
        ("1.5T", 1500.0),
        ("480M", 0.48),
        ("30b", 30.0),
        (120e9, 120.0),
        ("120e9", 120.0),  # PyYAML reads an unquoted 120e9 as text
        (120, 120.0),
        (7_000_000_000, 7.0),
    ],
)
def test_parameter_counts_in_sparkrun_shorthand(written: object, billions: float) -> None:
    recipe = parse_sparkrun(minimal(metadata={"model_params": written}))

    assert recipe.fields["total_params_b"] == billions


def test_an_unreadable_parameter_count_is_an_error() -> None:
    recipe = parse_sparkrun(minimal(metadata={"model_params": "huge"}))

    assert recipe.errors == {
        "metadata.model_params": [
            "expected a parameter count such as '120B', '1.5T' or 120e9, got 'huge'"
        ]
    }


def test_unquoted_120e9_from_yaml_is_read() -> None:
    recipe = parse("model: a/b\nmetadata:\n  model_params: 120e9\n")

    assert recipe.fields["total_params_b"] == 120.0


@pytest.mark.parametrize(
    ("model_dtype", "weight_format"),
    [
        ("bfloat16", "bf16"),
        ("float16", "fp16"),
        ("fp8", "fp8"),
        ("fp4", "nvfp4"),
        ("MXFP4", "mxfp4"),
        ("awq", "int4"),
        ("gptq", "int4"),
        ("int8", "int8"),
    ],
)
def test_model_dtype_is_normalised(model_dtype: str, weight_format: str) -> None:
    recipe = parse_sparkrun(minimal(metadata={"model_dtype": model_dtype}))

    assert recipe.fields["weight_format"] == weight_format


def test_bf16_kv_cache_dtype_becomes_auto() -> None:
    recipe = parse_sparkrun(minimal(defaults={"kv_cache_dtype": "bf16"}))

    assert recipe.fields["kv_cache_dtype"] == "auto"


def test_unknown_keys_are_reported_with_their_path() -> None:
    recipe = parse_sparkrun(
        minimal(defaults={"max_model_len": 8192, "foo": 1}, metadata={"bar": 2}, baz=3)
    )

    assert set(recipe.errors) == {"defaults.foo", "metadata.bar", "baz"}
    assert recipe.errors["defaults.foo"][0].startswith(
        "unknown key 'foo' in defaults: expected one of tensor_parallel, "
        "gpu_memory_utilization, max_model_len,"
    )
    assert recipe.errors["metadata.bar"][0].startswith("unknown key 'bar' in metadata:")
    assert recipe.errors["baz"][0].startswith("unknown top-level key 'baz': expected one of")
    assert recipe.fields["max_model_len"] == 8192


def test_wrong_types_are_reported_per_key() -> None:
    recipe = parse_sparkrun(
        minimal(
            container=["not", "text"],
            defaults={
                "max_model_len": "lots",
                "tensor_parallel": 0,
                "enable_prefix_caching": "yes please",
                "kv_cache_dtype": "int4",
            },
            metadata={"num_layers": 12.5, "model_dtype": "q4_k_m"},
        )
    )

    assert recipe.error_messages() == [
        "container: expected text, got ['not', 'text'] (list)",
        "defaults.max_model_len: expected a whole number, got 'lots'",
        "defaults.tensor_parallel: expected a whole number of at least 1, got 0",
        "defaults.enable_prefix_caching: expected true or false, got 'yes please'",
        "defaults.kv_cache_dtype: expected one of auto, bf16, fp8, fp8_e4m3, fp8_e5m2, got 'int4'",
        "metadata.num_layers: expected a whole number, got 12.5 (float)",
        "metadata.model_dtype: expected one of bf16, fp16, fp32, fp8, int8, nvfp4, mxfp4, "
        "int4, got 'q4_k_m'",
    ]
    assert set(recipe.fields) == {"name", "model_id"}


def test_defaults_that_are_not_a_mapping_are_an_error() -> None:
    recipe = parse_sparkrun(minimal(defaults=["max_model_len=8192"]))

    assert recipe.errors == {
        "defaults": ["expected a mapping of settings, got ['max_model_len=8192'] (list)"]
    }


def test_sglang_runtime_is_refused() -> None:
    with pytest.raises(SparkrunImportError) as caught:
        parse_sparkrun({"model": "nvidia/Qwen3.5-397B-A17B-NVFP4", "runtime": "sglang"})

    assert str(caught.value) == (
        "This sparkrun recipe uses the 'sglang' runtime: SparkPanel runs vLLM only (runtime: vllm)."
    )


def test_sglang_command_without_runtime_is_refused() -> None:
    doc = {"model": "a/b", "command": "python3 -m sglang.launch_server --model-path {model}"}

    with pytest.raises(SparkrunImportError, match="starts sglang, not vLLM"):
        parse_sparkrun(doc)


def test_vllm_flavoured_runtimes_are_accepted() -> None:
    for runtime in ("vllm", "vllm-ray", "vllm-distributed", "eugr-vllm", None):
        assert parse_sparkrun(minimal(runtime=runtime)).fields["model_id"] == "Qwen/Qwen3-32B"


def test_a_recipe_without_a_model_is_refused() -> None:
    with pytest.raises(SparkrunImportError, match="has no 'model'"):
        parse_sparkrun({"runtime": "vllm", "container": "img"})


def test_name_comes_from_the_hint_then_the_model_id() -> None:
    assert parse_sparkrun(minimal(), name_hint="my-recipe").fields["name"] == "my-recipe"
    assert parse_sparkrun(minimal()).fields["name"] == "Qwen3-32B"
    assert parse_sparkrun(minimal(name="explicit"), name_hint="hint").fields["name"] == "explicit"


def test_flags_written_into_the_command_are_imported() -> None:
    recipe = parse(NEMOTRON_NANO_RECIPE)

    assert recipe.errors == {}
    assert recipe.fields == {
        "name": "NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
        "model_id": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
        "image": "scitrera/dgx-spark-vllm:0.16.0-t5",
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": "0.8",
        "max_model_len": 200000,
        "served_model_name": "nemotron3-30b-a3b",
        "total_params_b": 30.0,
        "weight_format": "nvfp4",
        "max_num_seqs": 4,
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": True,
        "tool_call_parser": "qwen3_coder",  # the recipe's own field (was dropped)
    }
    assert recipe.description == ("NVIDIA Nemotron 3 Nano 30B (upstream NVFP4) -- cluster or solo")


def test_command_flags_without_a_field_are_listed_as_ignored() -> None:
    ignored = parse(NEMOTRON_NANO_RECIPE).ignored

    assert (
        "command: flags SparkPanel's recipe has no field for were not imported: "
        "--enable-auto-tool-choice --trust-remote-code"
    ) in ignored
    assert (
        "env (VLLM_ALLOW_LONG_MAX_MODEL_LEN): container environment variables are not "
        "imported; SparkPanel sets the container's environment itself." in ignored
    )
    assert not any(line.startswith("defaults.tool_call_parser") for line in ignored)
    assert any(line.startswith("min_nodes: multi-node topology") for line in ignored)


def test_a_literal_command_flag_wins_over_the_default() -> None:
    recipe = parse_sparkrun(
        minimal(defaults={"max_num_seqs": 8}, command="vllm serve {model} --max-num-seqs=2")
    )

    assert recipe.fields["max_num_seqs"] == 2
    assert recipe.ignored == [
        "max_num_seqs: the command passes --max-num-seqs 2, which wins over the default (8) "
        "because it is what sparkrun runs."
    ]


def test_a_bad_value_in_the_command_is_reported_under_command() -> None:
    recipe = parse_sparkrun(minimal(command="vllm serve {model} --max-model-len lots"))

    assert recipe.errors == {"command": ["--max-model-len: expected a whole number, got 'lots'"]}


def test_a_bad_default_is_reported_once_even_when_the_command_uses_it() -> None:
    recipe = parse_sparkrun(
        minimal(
            defaults={"max_model_len": "lots"},
            command="vllm serve {model} --max-model-len {max_model_len}",
        )
    )

    assert recipe.errors == {"defaults.max_model_len": ["expected a whole number, got 'lots'"]}


def test_vllm_quantization_names_pass_through_and_checkpoint_formats_are_detected() -> None:
    # modelopt_fp4 is vLLM's own method name; the form checks it against the image's vLLM.
    recipe = parse_sparkrun(minimal(defaults={"quantization": "modelopt_fp4"}))
    assert recipe.fields["quantization"] == "modelopt_fp4"
    # metadata describes the checkpoint: vLLM detects NVFP4 from hf_quant_config.json itself.
    recipe = parse_sparkrun(minimal(metadata={"quantization": "nvfp4"}))
    assert recipe.fields["quantization"] == ""


def test_swap_space_is_not_carried_over_and_the_import_says_why() -> None:
    recipe = parse_sparkrun(minimal(defaults={"swap_space": 0}))
    assert "swap_space" not in recipe.fields
    assert any("defaults.swap_space" in note and "removed in vLLM 0.18" in note
               for note in recipe.ignored), recipe.ignored  # fmt: skip


def test_looks_like_sparkrun_for_sparkrun_recipes() -> None:
    assert looks_like_sparkrun(yaml.safe_load(FULL_RECIPE))
    assert looks_like_sparkrun({"model": "a/b", "container": "img"})
    assert looks_like_sparkrun({"model": "a/b", "runtime": "vllm"})


def test_looks_like_sparkrun_rejects_other_documents() -> None:
    assert not looks_like_sparkrun({"model": "a/b"})  # nothing sparkrun-specific
    assert not looks_like_sparkrun({"container": "img", "defaults": {}})  # no model
    assert not looks_like_sparkrun({"model": "a/b", "defaults": {}, "recipes": []})
    assert not looks_like_sparkrun({"model": "a/b", "container": "img", "sparkpanel": 1})
    assert not looks_like_sparkrun([{"model": "a/b", "container": "img"}])
    assert not looks_like_sparkrun("model: a/b")
    assert not looks_like_sparkrun({"model": 3, "container": "img"})


def test_a_pinned_model_revision_becomes_the_recipes_revision() -> None:
    doc = yaml.safe_load(FULL_RECIPE)
    doc["model_revision"] = "3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"
    recipe = parse_sparkrun(doc)
    assert recipe.fields["revision"] == doc["model_revision"]
    assert not any(line.startswith("model_revision") for line in recipe.ignored)
    doc["model_revision"] = 7
    assert "model_revision" in parse_sparkrun(doc).errors


def test_tool_call_and_reasoning_parsers_become_the_recipes_fields() -> None:
    """The recipe has fields for both; an import used to drop them (its note said it had
    none), and the server ran without tool calls or reasoning parsing."""
    from_defaults = parse_sparkrun({
        "model": "org/m", "runtime": "vllm",
        "defaults": {"tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1"},
    })  # fmt: skip
    from_command = parse_sparkrun({
        "model": "org/m", "runtime": "vllm",
        "defaults": {"reasoning_parser": "deepseek_r1"},
        "command": "vllm serve {model} --tool-call-parser=qwen3_coder "
                   "--reasoning-parser {reasoning_parser}",
    })  # fmt: skip
    for recipe, tool in ((from_defaults, "hermes"), (from_command, "qwen3_coder")):
        assert recipe.errors == {}
        assert recipe.fields["tool_call_parser"] == tool
        assert recipe.fields["reasoning_parser"] == "deepseek_r1"
        assert not any("parser" in line for line in recipe.ignored), recipe.ignored
