"""Import a sparkrun recipe (YAML, already parsed) into SparkPanel recipe fields.

sparkrun (github.com/scitrera/sparkrun) is the CLI many DGX Spark owners launch models
with; its recipes are the format people will paste into the panel. The format is
documented in sparkrun's RECIPES.md:

    model: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4
    runtime: vllm
    container: scitrera/dgx-spark-vllm:0.16.0-t5
    metadata: {description: ..., model_params: 30B, model_dtype: nvfp4, kv_dtype: ...,
               num_layers: ..., num_kv_heads: ..., head_dim: ..., model_vram: ...}
    defaults: {port: 8000, host: 0.0.0.0, tensor_parallel: 1,
               gpu_memory_utilization: 0.8, max_model_len: 200000, served_model_name: ...}
    env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"}
    command: |
      vllm serve {model} --max-model-len {max_model_len} ... --max-num-seqs 4

`defaults` only fill `{placeholders}` in `command`, and real recipes often write flags
such as `--max-num-seqs` straight into the command, so the command is read too: it is
what sparkrun actually runs, and where it disagrees with a default it wins.

Pure Python, no Django. Nothing here enforces the ≤ 0.90 utilization rule: the caller's
form validates every field, so this module only checks that values have the right type
and reports each problem against its key path.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from sparkdomain.bounded import clip
from vllm_adapter import advice
from vllm_adapter import contract as vllm_contract

# sparkrun's runtimes that start vLLM (the last three are its multi-node and
# custom-build flavours); sglang, llama-cpp and trtllm are other engines.
VLLM_RUNTIMES = frozenset({"vllm", "vllm-distributed", "vllm-ray", "eugr-vllm"})
# How sparkrun itself guesses the runtime from a command when none is given.
_OTHER_ENGINE_COMMANDS = (
    (re.compile(r"^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b"), "sglang"),
    (re.compile(r"^llama-server\b"), "llama-cpp"),
    (re.compile(r"^(?:trtllm-serve|mpirun\b.*trtllm)"), "trtllm"),
)

TOP_LEVEL_MAPPED = ("model", "container", "runtime", "name", "description", "defaults", "metadata")
TOP_LEVEL_IGNORED: dict[str, str] = {
    "command": "",  # read for its flags below
    "env": "",  # its sentence names the variables
    "model_revision": "SparkPanel serves the model's default branch; the pinned revision "
    "is not imported.",
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

# Flags a vLLM recipe in SparkPanel has no field for: sparkrun substitutes them into its
# own command template, so they are legitimate but cannot be carried over.
_TEMPLATE_ONLY = "a flag sparkrun puts into its command; SparkPanel's recipe has no field for it."
DEFAULTS_IGNORED: dict[str, str] = {
    "port": "SparkPanel chooses the port of each run itself.",
    "host": "SparkPanel chooses the address the server listens on itself.",
    "tool_call_parser": _TEMPLATE_ONLY,
    "reasoning_parser": _TEMPLATE_ONLY,
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

KV_CACHE_DTYPES = {
    "auto": "auto",
    # vLLM's auto already caches in the bf16 of a bf16 checkpoint.
    "bf16": "auto",
    "bfloat16": "auto",
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
}
WEIGHT_FORMATS = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8": "fp8",
    "int8": "int8",
    "w8a8": "int8",
    "awq8": "int8",
    "nvfp4": "nvfp4",
    "fp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "mxfp4": "mxfp4",
    "int4": "int4",
    "awq": "int4",
    "awq4": "int4",
    "gptq": "int4",
    "w4a16": "int4",
}
CHECKPOINT_KV_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
# sparkrun's SGLang-style names and plain synonyms, in vLLM's vocabulary.
QUANTIZATION_ALIASES = {"none": ""}
# sparkrun's metadata names the checkpoint's format, not a vLLM flag: vLLM detects these
# from the checkpoint itself (hf_quant_config.json), so the recipe leaves the flag out.
CHECKPOINT_DETECTED = {"nvfp4", "fp4", "modelopt_fp4"}

_PARAM_SUFFIX_BILLIONS = {"T": 1000.0, "B": 1.0, "M": 1e-3, "K": 1e-6}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
# A filled-in vLLM command is a few hundred characters; placeholders that fill in values
# which fill in others stop at these bounds (a cycle is refused outright).
MAX_COMMAND_CHARS = 16_384
MAX_PLACEHOLDER_DEPTH = 10
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")


class SparkrunImportError(ValueError):
    """The document cannot be imported at all (not a vLLM recipe, no model)."""


class PlaceholderError(ValueError):
    """The command's {placeholders} cannot be filled in within bounds."""


@dataclass
class SparkrunRecipe:
    """A sparkrun recipe in SparkPanel's field names.

    `errors` maps a key path ("defaults.max_model_len") to what is wrong with it; the
    field is left out of `fields` so the form shows it empty rather than wrong.
    `ignored` says, one sentence each, which accepted keys were deliberately not used.
    """

    fields: dict[str, object] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    description: str = ""

    def error_messages(self) -> list[str]:
        """Every error as one "path: message" line, for a form's non-field errors."""
        return [
            f"{path}: {message}" for path, messages in self.errors.items() for message in messages
        ]

    def _error(self, path: str, message: str) -> None:
        self.errors.setdefault(path, []).append(message)


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
    metadata = _section(doc, "metadata", recipe)
    defaults = _section(doc, "defaults", recipe)

    fields_["name"] = _recipe_name(doc, metadata, name_hint, model, recipe)
    fields_["model_id"] = model
    if "container" in doc:
        image = _text(doc["container"], "container", recipe)
        if image:
            fields_["image"] = image
    recipe.description = _description(doc, metadata, recipe)

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

    _read_section(defaults, "defaults", DEFAULTS_FIELDS, DEFAULTS_IGNORED, recipe)
    _read_section(metadata, "metadata", METADATA_FIELDS, METADATA_IGNORED, recipe)
    _read_env(doc.get("env"), recipe)
    if isinstance(command, str) and command.strip():
        _read_command(command, defaults, model, recipe)
    elif command is not None and not isinstance(command, str):
        recipe._error("command", f"expected text, got {_shown(command)}")
    return recipe


# --- value readers: each returns None after recording an error -------------------------


Reader = Callable[[object, str, SparkrunRecipe], object]


def _shown(value: object) -> str:
    if isinstance(value, str):
        return clip(repr(value))
    return f"{clip(value)} ({type(value).__name__})"


def _whole(value: object, path: str, recipe: SparkrunRecipe, minimum: int = 1) -> int | None:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None:
        recipe._error(path, f"expected a whole number, got {_shown(value)}")
        return None
    if number < minimum:
        recipe._error(path, f"expected a whole number of at least {minimum}, got {number}")
        return None
    return number


def _positive_whole(value: object, path: str, recipe: SparkrunRecipe) -> int | None:
    return _whole(value, path, recipe, minimum=1)


def _count(value: object, path: str, recipe: SparkrunRecipe) -> int | None:
    return _whole(value, path, recipe, minimum=0)


def _decimal_text(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    """Keep the number as text so the caller validates it as a Decimal, not a float."""
    text = None if isinstance(value, bool) else str(value).strip()
    if isinstance(value, int | float | str) and text:
        try:
            if Decimal(text).is_finite():
                return text
        except InvalidOperation:
            pass
    recipe._error(path, f"expected a number such as 0.85, got {_shown(value)}")
    return None


def _number(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if is_number and math.isfinite(value) and value >= 0:
        return value
    recipe._error(path, f"expected a number of at least 0, got {_shown(value)}")
    return None


def _boolean(value: object, path: str, recipe: SparkrunRecipe) -> bool | None:
    if isinstance(value, bool):
        return value
    recipe._error(path, f"expected true or false, got {_shown(value)}")
    return None


def _text(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    recipe._error(path, f"expected text, got {_shown(value)}")
    return None


def _choice(table: dict[str, str], shown: tuple[str, ...]) -> Reader:
    def read(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            if key in table:
                return table[key]
        recipe._error(path, f"expected one of {', '.join(shown)}, got {_shown(value)}")
        return None

    return read


_kv_cache_dtype = _choice(KV_CACHE_DTYPES, ("auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"))
_weight_format = _choice(
    WEIGHT_FORMATS, ("bf16", "fp16", "fp32", "fp8", "int8", "nvfp4", "mxfp4", "int4")
)
_checkpoint_kv_dtype = _choice(CHECKPOINT_KV_DTYPES, ("bf16", "fp16", "fp8"))


def _quantization(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    # Passed through in vLLM's spelling: the form knows which methods the image supports.
    if isinstance(value, str):
        name = value.strip().lower()
        return QUANTIZATION_ALIASES.get(name, name)
    if value is None:
        return ""
    recipe._error(
        path, f"expected a vLLM quantization method such as modelopt_fp4, got {_shown(value)}"
    )
    return None


def _metadata_quantization(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    if isinstance(value, str) and value.strip().lower() in CHECKPOINT_DETECTED:
        return ""
    return _quantization(value, path, recipe)


def _removed(flag: str) -> Reader:
    """A key for a flag today's vLLM no longer has: not carried over, and the import says
    why (real vLLM would refuse the whole vector with 'unrecognized arguments')."""

    def read(value: object, path: str, recipe: SparkrunRecipe) -> None:
        recipe.ignored.append(
            f"{path} ({_shown(value)}): not carried over — "
            + advice.for_flag(flag, vllm_contract.latest_version())
        )

    return read


def _billions(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    """sparkrun writes parameter counts as "120B", "1.5T", 120e9 or a bare number."""
    billions: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        billions = _scale_plain(float(value))
    elif isinstance(value, str):
        text = value.strip().replace("_", "").replace(",", "").replace(" ", "")
        suffix = text[-1:].upper()
        try:
            if suffix in _PARAM_SUFFIX_BILLIONS:
                billions = float(text[:-1]) * _PARAM_SUFFIX_BILLIONS[suffix]
            else:
                billions = _scale_plain(float(text))
        except ValueError:
            billions = None
    if billions is None or not math.isfinite(billions) or billions <= 0:
        recipe._error(
            path,
            f"expected a parameter count such as '120B', '1.5T' or 120e9, got {_shown(value)}",
        )
        return None
    return round(billions, 6)


def _scale_plain(number: float) -> float:
    # A bare number below a million cannot be a real parameter count: it is billions.
    return number if number < 1e6 else number / 1e9


def _gigabytes(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    number = _number(value, path, recipe)
    if number is None:
        return None
    if number == 0:
        recipe._error(path, "expected the weight size in GB, got 0")
        return None
    return float(number)


# key -> (recipe field, reader)
DEFAULTS_FIELDS: dict[str, tuple[str, Reader]] = {
    "tensor_parallel": ("tensor_parallel_size", _positive_whole),
    "gpu_memory_utilization": ("gpu_memory_utilization", _decimal_text),
    "max_model_len": ("max_model_len", _positive_whole),
    "max_num_seqs": ("max_num_seqs", _positive_whole),
    "kv_cache_dtype": ("kv_cache_dtype", _kv_cache_dtype),
    "served_model_name": ("served_model_name", _text),
    "max_num_batched_tokens": ("max_num_batched_tokens", _positive_whole),
    "enable_prefix_caching": ("enable_prefix_caching", _boolean),
    "enforce_eager": ("enforce_eager", _boolean),
    "swap_space": ("", _removed("--swap-space")),
    "quantization": ("quantization", _quantization),
}
METADATA_FIELDS: dict[str, tuple[str, Reader]] = {
    "model_params": ("total_params_b", _billions),
    "active_params": ("active_params_b", _billions),
    "model_dtype": ("weight_format", _weight_format),
    "kv_dtype": ("checkpoint_kv_dtype", _checkpoint_kv_dtype),
    "num_layers": ("num_layers", _positive_whole),
    "attention_layers": ("attention_layers", _count),
    "num_kv_heads": ("kv_heads", _positive_whole),
    "head_dim": ("head_dim", _positive_whole),
    "quantization": ("quantization", _metadata_quantization),
    # sparkrun's override for the weight size; mixed-precision checkpoints need it.
    "model_vram": ("weight_gb", _gigabytes),
}
# Read elsewhere (name, description) but valid in metadata.
METADATA_SPECIAL = ("name", "description")

# vLLM command-line flag (without dashes, '_' as '-') -> (recipe field, reader)
COMMAND_FLAGS: dict[str, tuple[str, Reader]] = {
    "max-model-len": ("max_model_len", _positive_whole),
    "max-num-seqs": ("max_num_seqs", _positive_whole),
    "max-num-batched-tokens": ("max_num_batched_tokens", _positive_whole),
    "gpu-memory-utilization": ("gpu_memory_utilization", _decimal_text),
    "kv-cache-dtype": ("kv_cache_dtype", _kv_cache_dtype),
    "tensor-parallel-size": ("tensor_parallel_size", _positive_whole),
    "tp": ("tensor_parallel_size", _positive_whole),
    "served-model-name": ("served_model_name", _text),
    "quantization": ("quantization", _quantization),
    "q": ("quantization", _quantization),
    "swap-space": ("", _removed("--swap-space")),
}
COMMAND_SWITCHES: dict[str, tuple[str, bool]] = {
    "enable-prefix-caching": ("enable_prefix_caching", True),
    "no-enable-prefix-caching": ("enable_prefix_caching", False),
    "enforce-eager": ("enforce_eager", True),
    "no-enforce-eager": ("enforce_eager", False),
}
# Flags whose value SparkPanel sets itself; silently dropped from the command.
COMMAND_PANEL_OWNED = frozenset({"host", "port", "model"})


# --- sections ------------------------------------------------------------------------------


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


def _section(doc: Mapping[str, object], key: str, recipe: SparkrunRecipe) -> dict[str, object]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        recipe._error(key, f"expected a mapping of settings, got {_shown(value)}")
        return {}
    return {str(k): v for k, v in value.items()}


def _read_section(
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


def _recipe_name(
    doc: Mapping[str, object],
    metadata: dict[str, object],
    name_hint: str,
    model: str,
    recipe: SparkrunRecipe,
) -> str:
    for path, value in (("name", doc.get("name")), ("metadata.name", metadata.get("name"))):
        if value is not None:
            name = _text(value, path, recipe)
            if name:
                return name
    if name_hint.strip():
        return name_hint.strip()
    # "org/Model-Name:Q8_0" -> "Model-Name"
    return model.rstrip("/").rsplit("/", 1)[-1].split(":", 1)[0]


def _description(
    doc: Mapping[str, object], metadata: dict[str, object], recipe: SparkrunRecipe
) -> str:
    for path, value in (
        ("description", doc.get("description")),
        ("metadata.description", metadata.get("description")),
    ):
        if value is not None:
            text = _text(value, path, recipe)
            if text:
                return text
    return ""


def _read_env(env: object, recipe: SparkrunRecipe) -> None:
    if env is None:
        return
    if not isinstance(env, Mapping):
        recipe._error("env", f"expected a mapping of variables, got {_shown(env)}")
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


# --- the command ---------------------------------------------------------------------------


def _render(command: str, values: Mapping[str, object]) -> str:
    """sparkrun's {placeholder} substitution; values may hold placeholders themselves.

    Each name is filled in once (then reused), a name met again inside its own value is
    refused (a cycle has no end), and so is nesting deeper than MAX_PLACEHOLDER_DEPTH or a
    result longer than MAX_COMMAND_CHARS: three copies of a value that holds three copies
    of the next one grow exponentially without any cycle."""
    filled: dict[str, str] = {}

    def fill(text: str, chain: tuple[str, ...]) -> str:
        if len(chain) > MAX_PLACEHOLDER_DEPTH:
            raise PlaceholderError(
                f"placeholders are nested more than {MAX_PLACEHOLDER_DEPTH} deep "
                f"({' → '.join('{' + clip(n, 30) + '}' for n in chain[:4])} → …)"
            )
        parts: list[str] = []
        size = 0
        position = 0
        for match in _PLACEHOLDER.finditer(text):
            name = match.group(1)
            parts.append(text[position : match.start()])
            position = match.end()
            if name not in values:
                parts.append(match.group(0))
            elif name in chain:
                loop = [*chain[chain.index(name) :], name]
                raise PlaceholderError(
                    f"the placeholder {{{clip(name, 30)}}} refers to itself ("
                    + " → ".join("{" + clip(n, 30) + "}" for n in loop[:6])
                    + ("…" if len(loop) > 6 else "")
                    + ")"
                )
            else:
                if name not in filled:
                    filled[name] = fill(_placeholder_text(values[name]), (*chain, name))
                parts.append(filled[name])
            size += len(parts[-1]) + len(parts[-2])
            if size > MAX_COMMAND_CHARS:
                break
        parts.append(text[position:])
        result = "".join(parts)
        if len(result) > MAX_COMMAND_CHARS:
            raise PlaceholderError(
                f"with its placeholders filled in, the command is longer than "
                f"{MAX_COMMAND_CHARS:,} characters (a vLLM command is a few hundred)"
            )
        return result

    return _CONTINUATION.sub(" ", fill(command, ()))


def _placeholder_text(value: object) -> str:
    # A mapping or list in a placeholder is not a command-line value; its text is bounded
    # by what the document may hold, and cut to the command's own bound.
    text = value if isinstance(value, str) else str(value)
    return text[: MAX_COMMAND_CHARS + 1]


def _read_command(
    command: str, defaults: dict[str, object], model: str, recipe: SparkrunRecipe
) -> None:
    try:
        rendered = _render(command, {**defaults, "model": model})
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
