"""parse_sparkrun(): one sparkrun recipe (YAML, already parsed) onto SparkPanel recipe
fields, every problem collected at once; looks_like_sparkrun() tells it from SparkPanel's
own YAML. Refuses recipes for another engine than vLLM."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.command_flags import read_command
from sparkdomain.sparkrun.recipe import SparkrunImportError, SparkrunRecipe
from sparkdomain.sparkrun.sections import (
    DEFAULTS_FIELDS,
    DEFAULTS_IGNORED,
    METADATA_FIELDS,
    METADATA_IGNORED,
    read_env,
    read_section,
    recipe_description,
    recipe_name,
    section_mapping,
)
from sparkdomain.sparkrun.values import read_text, shown_value

# sparkrun's runtimes that start vLLM (the last three are its multi-node and
# custom-build flavours); sglang, llama-cpp and trtllm are other engines.
VLLM_RUNTIMES = frozenset({"vllm", "vllm-distributed", "vllm-ray", "eugr-vllm"})
# How sparkrun itself guesses the runtime from a command when none is given.
_OTHER_ENGINE_COMMANDS = (
    (re.compile(r"^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b"), "sglang"),
    (re.compile(r"^llama-server\b"), "llama-cpp"),
    (re.compile(r"^(?:trtllm-serve|mpirun\b.*trtllm)"), "trtllm"),
)

TOP_LEVEL_MAPPED = (
    "model", "model_revision", "container", "runtime", "name", "description", "defaults",
    "metadata",
)  # fmt: skip
TOP_LEVEL_IGNORED: dict[str, str] = {
    "command": "",  # read for its flags below
    "env": "",  # its sentence names the variables
    "sparkrun_version": "sparkrun's format version; nothing to import.",
    "recipe_version": "sparkrun's format version; nothing to import.",
    "runtime_version": "sparkrun's runtime version; the container image decides it here.",
    "mode": "multi-node topology is not imported: SparkPanel starts a recipe on the host "
    "you choose.",
    "min_nodes": "multi-node topology is not imported: SparkPanel starts a recipe on the "
    "host you choose.",
    "max_nodes": "multi-node topology is not imported: SparkPanel starts a recipe on the "
    "host you choose.",
    "solo_only": "multi-node topology is not imported: SparkPanel starts a recipe on the "
    "host you choose.",
    "cluster_only": "multi-node topology is not imported: SparkPanel starts a recipe on the "
    "host you choose.",
    "runtime_config": "sparkrun's runtime-specific settings (container builds, mods) are "
    "not imported.",
    "builder": "sparkrun's container builder is not imported.",
    "builder_config": "sparkrun's container builder is not imported.",
    "benchmark": "sparkrun's benchmark settings are not imported: queue benchmarks in SparkPanel.",
    "pre_exec": "commands sparkrun runs around the container are not imported.",
    "post_exec": "commands sparkrun runs around the container are not imported.",
    "post_commands": "commands sparkrun runs around the container are not imported.",
    "stop_after_post": "commands sparkrun runs around the container are not imported.",
}


def looks_like_sparkrun(doc: object) -> bool:
    """Tell a sparkrun recipe from SparkPanel's own YAML so one upload box takes both."""
    if not isinstance(doc, Mapping):
        return False
    model = doc.get("model")
    if not isinstance(model, str) or not model.strip():
        return False
    if "recipes" in doc or "sparkpanel" in doc:
        return False
    return any(key in doc for key in ("container", "defaults", "metadata", "runtime"))


def parse_sparkrun(doc: Mapping[str, object], *, name_hint: str = "") -> SparkrunRecipe:
    """Map one sparkrun recipe onto recipe fields, collecting every problem at once.

    Raises SparkrunImportError only when nothing sensible can be imported; everything
    else is reported in `errors` or `ignored` so the user sees the whole picture.
    """
    if not isinstance(doc, Mapping):
        raise SparkrunImportError(
            f"A sparkrun recipe is a YAML mapping (model:, container:, defaults:, ...), "
            f"got a {type(doc).__name__}."
        )
    model = doc.get("model")
    if not isinstance(model, str) or not model.strip():
        raise SparkrunImportError("The sparkrun recipe has no 'model' (a Hugging Face model id).")
    model = model.strip()
    command = doc.get("command")
    _check_runtime(doc.get("runtime"), command if isinstance(command, str) else "")

    recipe = SparkrunRecipe()
    fields_ = recipe.fields
    metadata = section_mapping(doc, "metadata", recipe)
    defaults = section_mapping(doc, "defaults", recipe)

    fields_["name"] = recipe_name(doc, metadata, name_hint, model, recipe)
    fields_["model_id"] = model
    if doc.get("model_revision") not in (None, ""):
        revision = read_text(doc["model_revision"], "model_revision", recipe)
        if revision:
            fields_["revision"] = revision
    if "container" in doc:
        image = read_text(doc["container"], "container", recipe)
        if image:
            fields_["image"] = image
    recipe.description = recipe_description(doc, metadata, recipe)

    for key in doc:
        if key in TOP_LEVEL_MAPPED:
            continue
        if key in TOP_LEVEL_IGNORED:
            sentence = TOP_LEVEL_IGNORED[key]
            if sentence:
                recipe.ignored.append(f"{key}: {sentence}")
            continue
        recipe._error(
            clip(str(key), 60),
            f"unknown top-level key '{clip(str(key), 60)}': expected one of "
            + ", ".join((*TOP_LEVEL_MAPPED, *TOP_LEVEL_IGNORED)),
        )

    read_section(defaults, "defaults", DEFAULTS_FIELDS, DEFAULTS_IGNORED, recipe)
    read_section(metadata, "metadata", METADATA_FIELDS, METADATA_IGNORED, recipe)
    read_env(doc.get("env"), recipe)
    if isinstance(command, str) and command.strip():
        read_command(command, defaults, model, recipe)
    elif command is not None and not isinstance(command, str):
        recipe._error("command", f"expected text, got {shown_value(command)}")
    return recipe


def _check_runtime(runtime: object, command: str) -> None:
    if runtime is None or runtime == "":
        # sparkrun defaults to vLLM but first looks at what the command starts.
        for pattern, engine in _OTHER_ENGINE_COMMANDS:
            if pattern.match(command.strip()):
                raise SparkrunImportError(
                    f"This sparkrun recipe's command starts {engine}, not vLLM: SparkPanel "
                    "runs vLLM only."
                )
        return
    if not isinstance(runtime, str):
        raise SparkrunImportError(f"runtime must be text such as 'vllm', got {clip(runtime)}.")
    if runtime.strip().lower() not in VLLM_RUNTIMES:
        raise SparkrunImportError(
            f"This sparkrun recipe uses the '{clip(runtime.strip(), 60)}' runtime: SparkPanel "
            "runs vLLM "
            "only (runtime: vllm)."
        )
