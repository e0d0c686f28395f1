"""The recipe file's sections: which keys of defaults and metadata map onto which recipe
field (and which are deliberately not used), how a section is read, the recipe's name and
description, and the env section."""

from __future__ import annotations

from collections.abc import Mapping

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.recipe import SparkrunRecipe
from sparkdomain.sparkrun.values import (
    Reader,
    read_billions,
    read_boolean,
    read_checkpoint_kv_dtype,
    read_count,
    read_decimal_text,
    read_gigabytes,
    read_kv_cache_dtype,
    read_metadata_quantization,
    read_positive_whole,
    read_quantization,
    read_text,
    read_weight_format,
    removed_flag_reader,
    shown_value,
)

# Flags a vLLM recipe in SparkPanel has no field for: sparkrun substitutes them into its
# own command template, so they are legitimate but cannot be carried over.
_TEMPLATE_ONLY = "a flag sparkrun puts into its command; SparkPanel's recipe has no field for it."
DEFAULTS_IGNORED: dict[str, str] = {
    "port": "SparkPanel chooses the port of each run itself.",
    "host": "SparkPanel chooses the address the server listens on itself.",
    "chat_template": _TEMPLATE_ONLY,
    "attention_backend": _TEMPLATE_ONLY,
    "distributed_executor_backend": _TEMPLATE_ONLY,
    "load_format": _TEMPLATE_ONLY,
    "pipeline_parallel": _TEMPLATE_ONLY,
    "trust_remote_code": _TEMPLATE_ONLY,
}
METADATA_IGNORED: dict[str, str] = {
    "maintainer": "who maintains the sparkrun recipe; not imported.",
    "kv_vram_per_token": "SparkPanel computes KV memory per token from the architecture.",
}

# key -> (recipe field, reader)
DEFAULTS_FIELDS: dict[str, tuple[str, Reader]] = {
    "tensor_parallel": ("tensor_parallel_size", read_positive_whole),
    "gpu_memory_utilization": ("gpu_memory_utilization", read_decimal_text),
    "max_model_len": ("max_model_len", read_positive_whole),
    "max_num_seqs": ("max_num_seqs", read_positive_whole),
    "kv_cache_dtype": ("kv_cache_dtype", read_kv_cache_dtype),
    "served_model_name": ("served_model_name", read_text),
    "max_num_batched_tokens": ("max_num_batched_tokens", read_positive_whole),
    "enable_prefix_caching": ("enable_prefix_caching", read_boolean),
    "enforce_eager": ("enforce_eager", read_boolean),
    "swap_space": ("", removed_flag_reader("--swap-space")),
    "quantization": ("quantization", read_quantization),
    # The recipe's own fields; the name is checked against the host's vLLM (its registry of
    # parsers) when the recipe is saved, in vLLM's words.
    "tool_call_parser": ("tool_call_parser", read_text),
    "reasoning_parser": ("reasoning_parser", read_text),
}
METADATA_FIELDS: dict[str, tuple[str, Reader]] = {
    "model_params": ("total_params_b", read_billions),
    "active_params": ("active_params_b", read_billions),
    "model_dtype": ("weight_format", read_weight_format),
    "kv_dtype": ("checkpoint_kv_dtype", read_checkpoint_kv_dtype),
    "num_layers": ("num_layers", read_positive_whole),
    "attention_layers": ("attention_layers", read_count),
    "num_kv_heads": ("kv_heads", read_positive_whole),
    "head_dim": ("head_dim", read_positive_whole),
    "quantization": ("quantization", read_metadata_quantization),
    # sparkrun's override for the weight size; mixed-precision checkpoints need it.
    "model_vram": ("weight_gb", read_gigabytes),
}
# Read elsewhere (name, description) but valid in metadata.
METADATA_SPECIAL = ("name", "description")


def section_mapping(
    doc: Mapping[str, object], key: str, recipe: SparkrunRecipe
) -> dict[str, object]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        recipe._error(key, f"expected a mapping of settings, got {shown_value(value)}")
        return {}
    return {str(k): v for k, v in value.items()}


def read_section(
    section: dict[str, object],
    name: str,
    mapped: dict[str, tuple[str, Reader]],
    ignored: dict[str, str],
    recipe: SparkrunRecipe,
) -> None:
    special = METADATA_SPECIAL if name == "metadata" else ()
    for key, value in section.items():
        path = f"{name}.{clip(key, 60)}"
        if key in mapped:
            field_name, reader = mapped[key]
            result = reader(value, path, recipe)
            before = recipe.fields.get(field_name)
            if result is None:
                continue
            if name == "metadata" and before is not None and before != result:
                # Only quantization is in both sections; defaults are what the server gets.
                recipe.ignored.append(
                    f"{path} ({clip(value, 60)}): differs from defaults.{key}; used the defaults "
                    "value, which is what the server is started with."
                )
                continue
            recipe.fields[field_name] = result
        elif key in ignored:
            recipe.ignored.append(f"{path} ({clip(value, 60)}): {ignored[key]}")
        elif key not in special:
            expected = ", ".join((*mapped, *ignored, *special))
            recipe._error(
                path, f"unknown key '{clip(key, 60)}' in {name}: expected one of {expected}"
            )


def recipe_name(
    doc: Mapping[str, object],
    metadata: dict[str, object],
    name_hint: str,
    model: str,
    recipe: SparkrunRecipe,
) -> str:
    for path, value in (("name", doc.get("name")), ("metadata.name", metadata.get("name"))):
        if value is not None:
            name = read_text(value, path, recipe)
            if name:
                return name
    if name_hint.strip():
        return name_hint.strip()
    # "org/Model-Name:Q8_0" -> "Model-Name"
    return model.rstrip("/").rsplit("/", 1)[-1].split(":", 1)[0]


def recipe_description(
    doc: Mapping[str, object], metadata: dict[str, object], recipe: SparkrunRecipe
) -> str:
    for path, value in (
        ("description", doc.get("description")),
        ("metadata.description", metadata.get("description")),
    ):
        if value is not None:
            text = read_text(value, path, recipe)
            if text:
                return text
    return ""


def read_env(env: object, recipe: SparkrunRecipe) -> None:
    if env is None:
        return
    if not isinstance(env, Mapping):
        recipe._error("env", f"expected a mapping of variables, got {shown_value(env)}")
        return
    if env:
        names = [clip(str(name), 40) for name in list(env)[:10]]
        if len(env) > 10:
            names.append(f"{len(env) - 10:,} more")
        recipe.ignored.append(
            "env ("
            + ", ".join(names)
            + "): container environment variables are not imported; SparkPanel sets the "
            "container's environment itself."
        )
