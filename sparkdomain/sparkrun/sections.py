"""The recipe file's descriptive sections: metadata (kept whole as provenance; the keys the
planner reads map onto the architecture fields), the recipe's name and description, and
the env section (kept where it only tunes vLLM, `sparkdomain/env_rules.py`)."""

from __future__ import annotations

from collections.abc import Mapping

from sparkdomain.bounded import clip
from sparkdomain.env_rules import MAX_VARIABLES, variable_problem
from sparkdomain.sparkrun.recipe import SparkrunRecipe
from sparkdomain.sparkrun.values import (
    Reader,
    read_billions,
    read_checkpoint_kv_dtype,
    read_count,
    read_gigabytes,
    read_params,
    read_positive_whole,
    read_text,
    read_weight_format,
    shown_value,
)

# metadata keys the planner reads → (recipe field, reader). Metadata never changes what
# vLLM is given (sparkrun passes none of it), so a value the planner cannot read is noted,
# never an error.
METADATA_FIELDS: dict[str, tuple[str, Reader]] = {
    "model_params": ("total_params_b", read_billions),
    "active_params": ("active_params_b", read_billions),
    "model_dtype": ("weight_format", read_weight_format),
    "kv_dtype": ("checkpoint_kv_dtype", read_checkpoint_kv_dtype),
    "num_layers": ("num_layers", read_positive_whole),
    "attention_layers": ("attention_layers", read_count),
    "num_kv_heads": ("kv_heads", read_positive_whole),
    "head_dim": ("head_dim", read_positive_whole),
    # sparkrun's override for the weight size; mixed-precision checkpoints need it.
    "model_vram": ("weight_gb", read_gigabytes),
}
# Kept as provenance and shown on the recipe's page (any other key is kept too).
METADATA_IGNORED: dict[str, str] = {
    "maintainer": "who maintains the recipe",
    "kv_vram_per_token": "SparkPanel computes KV memory per token from the architecture.",
    "quantization": "the checkpoint's format; vLLM detects it (sparkrun passes no metadata)",
}
# Read elsewhere (name, description).
METADATA_SPECIAL = ("name", "description")
# Kept for the check's what-if and older callers: `defaults` are read through the command
# vLLM is given now (sparkdomain/sparkrun/vector.py), so no defaults key is mapped here.
DEFAULTS_FIELDS: dict[str, tuple[str, Reader]] = {}
DEFAULTS_IGNORED: dict[str, str] = {}

MAX_KEPT_ITEMS = 50
MAX_KEPT_DEPTH = 4


def kept(value: object, depth: int = 0) -> object:
    """A JSON-safe, bounded copy of a descriptive value (metadata, notes) to keep."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if len(value) <= 2000 else value[:2000] + "…"
    if depth >= MAX_KEPT_DEPTH:
        return clip(value, 200)
    if isinstance(value, Mapping):
        return {
            clip(str(k), 80): kept(v, depth + 1) for k, v in list(value.items())[:MAX_KEPT_ITEMS]
        }
    if isinstance(value, list | tuple):
        return [kept(v, depth + 1) for v in list(value)[:MAX_KEPT_ITEMS]]
    return clip(value, 200)


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


def read_metadata(metadata: dict[str, object], recipe: SparkrunRecipe) -> None:
    """Every metadata key is kept (`source["metadata"]`); the planner's are mapped."""
    for key, value in metadata.items():
        if key not in METADATA_FIELDS:
            continue
        path = f"metadata.{clip(key, 60)}"
        if key == "model_params":
            pair = read_params(value, path, recipe)
            if pair is not None:
                recipe.fields["total_params_b"], active = pair
                recipe.fields.setdefault("active_params_b", active)
                continue
        field_name, reader = METADATA_FIELDS[key]
        scratch = SparkrunRecipe()
        result = reader(value, path, scratch)
        if result is None:
            message = "; ".join(scratch.errors.get(path, []))
            recipe.ignored.append(f"{path}: {message}; kept as written, not used by the planner.")
            continue
        recipe.fields[field_name] = result


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


def read_env(env: object, recipe: SparkrunRecipe) -> dict[str, str]:
    """The variables that only tune vLLM; every other one is noted with its reason."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        recipe._error("env", f"expected a mapping of variables, got {shown_value(env)}")
        return {}
    out: dict[str, str] = {}
    refused: list[str] = []
    for name, value in list(env.items())[: MAX_VARIABLES * 4]:
        problem = variable_problem(name, value)
        if problem:
            refused.append(problem)
        else:
            out[str(name)] = str(value)
    if len(out) > MAX_VARIABLES:
        refused.append(f"more than {MAX_VARIABLES} variables: the rest were not kept")
        out = dict(list(out.items())[:MAX_VARIABLES])
    for problem in refused[:10]:
        recipe.ignored.append(f"env: not kept — {problem}")
    if len(refused) > 10:
        recipe.ignored.append(f"env: {len(refused) - 10:,} more variables not kept")
    return out
