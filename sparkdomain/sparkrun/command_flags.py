"""The vLLM flags written straight into a sparkrun recipe's command: rendered, split into
arguments and read onto recipe fields, where they win over the defaults (the command is
what sparkrun actually runs)."""

from __future__ import annotations

import shlex

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.placeholders import PlaceholderError, render
from sparkdomain.sparkrun.recipe import SparkrunRecipe
from sparkdomain.sparkrun.sections import DEFAULTS_FIELDS
from sparkdomain.sparkrun.values import (
    Reader,
    read_decimal_text,
    read_kv_cache_dtype,
    read_positive_whole,
    read_quantization,
    read_text,
    removed_flag_reader,
)

# vLLM command-line flag (without dashes, '_' as '-') -> (recipe field, reader)
COMMAND_FLAGS: dict[str, tuple[str, Reader]] = {
    "max-model-len": ("max_model_len", read_positive_whole),
    "max-num-seqs": ("max_num_seqs", read_positive_whole),
    "max-num-batched-tokens": ("max_num_batched_tokens", read_positive_whole),
    "gpu-memory-utilization": ("gpu_memory_utilization", read_decimal_text),
    "kv-cache-dtype": ("kv_cache_dtype", read_kv_cache_dtype),
    "tensor-parallel-size": ("tensor_parallel_size", read_positive_whole),
    "tp": ("tensor_parallel_size", read_positive_whole),
    "served-model-name": ("served_model_name", read_text),
    "quantization": ("quantization", read_quantization),
    "q": ("quantization", read_quantization),
    "swap-space": ("", removed_flag_reader("--swap-space")),
    "tool-call-parser": ("tool_call_parser", read_text),
    "reasoning-parser": ("reasoning_parser", read_text),
}
COMMAND_SWITCHES: dict[str, tuple[str, bool]] = {
    "enable-prefix-caching": ("enable_prefix_caching", True),
    "no-enable-prefix-caching": ("enable_prefix_caching", False),
    "enforce-eager": ("enforce_eager", True),
    "no-enforce-eager": ("enforce_eager", False),
}
# Flags whose value SparkPanel sets itself; silently dropped from the command.
COMMAND_PANEL_OWNED = frozenset({"host", "port", "model"})


def read_command(
    command: str, defaults: dict[str, object], model: str, recipe: SparkrunRecipe
) -> None:
    try:
        rendered = render(command, {**defaults, "model": model})
    except PlaceholderError as exc:
        recipe._error("command", f"{exc}; the command was not read.")
        return
    try:
        tokens = shlex.split(rendered)
    except ValueError as exc:
        recipe.ignored.append(f"command: could not be split into arguments ({exc}); not read.")
        return

    unused: list[str] = []
    defaults_in_error = {
        DEFAULTS_FIELDS[key.split(".", 1)[1]][0]
        for key in recipe.errors
        if key.startswith("defaults.") and key.split(".", 1)[1] in DEFAULTS_FIELDS
    }
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("-") or token in ("-", "--"):
            continue
        flag, has_inline, inline = token.lstrip("-").partition("=")
        name = flag.replace("_", "-")
        if name in COMMAND_SWITCHES and not has_inline:
            field_name, value = COMMAND_SWITCHES[name]
            _from_command(recipe, field_name, value, token)
            continue
        takes_value = has_inline or (index < len(tokens) and not tokens[index].startswith("-"))
        value = inline if has_inline else (tokens[index] if takes_value else None)
        if takes_value and not has_inline:
            index += 1
        if name in COMMAND_PANEL_OWNED:
            continue
        if name not in COMMAND_FLAGS:
            unused.append(clip(token if value is None or has_inline else f"{token} {value}", 80))
            continue
        field_name, reader = COMMAND_FLAGS[name]
        if value is None or "{" in value or field_name in defaults_in_error:
            # No value, an unfilled placeholder, or a default already reported as wrong.
            continue
        scratch = SparkrunRecipe()
        result = reader(value, "command", scratch)
        for message in scratch.errors.get("command", []):
            recipe._error("command", f"--{flag}: {message}")
        if result is not None:
            _from_command(recipe, field_name, result, clip(f"--{flag} {value}", 80))
    if unused:
        shown = unused[:20] + ([f"(and {len(unused) - 20:,} more)"] if len(unused) > 20 else [])
        recipe.ignored.append(
            "command: flags SparkPanel's recipe has no field for were not imported: "
            + " ".join(shown)
        )


def _from_command(recipe: SparkrunRecipe, field_name: str, value: object, shown: str) -> None:
    before = recipe.fields.get(field_name)
    if before is not None and before != value:
        recipe.ignored.append(
            f"{field_name}: the command passes {shown}, which wins over the default "
            f"({before}) because it is what sparkrun runs."
        )
    recipe.fields[field_name] = value
