"""Reading single values of a sparkrun recipe into SparkPanel's vocabulary: whole numbers,
decimals, booleans, text, the dtype and weight-format names, quantization methods,
parameter counts ("120B") and sizes. Each reader returns None after recording an error
against the value's key path."""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.recipe import SparkrunRecipe
from vllm_adapter import advice
from vllm_adapter import contract as vllm_contract

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


# --- value readers: each returns None after recording an error -------------------------


Reader = Callable[[object, str, SparkrunRecipe], object]


def shown_value(value: object) -> str:
    if isinstance(value, str):
        return clip(repr(value))
    return f"{clip(value)} ({type(value).__name__})"


def read_whole(value: object, path: str, recipe: SparkrunRecipe, minimum: int = 1) -> int | None:
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None:
        recipe._error(path, f"expected a whole number, got {shown_value(value)}")
        return None
    if number < minimum:
        recipe._error(path, f"expected a whole number of at least {minimum}, got {number}")
        return None
    return number


def read_positive_whole(value: object, path: str, recipe: SparkrunRecipe) -> int | None:
    return read_whole(value, path, recipe, minimum=1)


def read_count(value: object, path: str, recipe: SparkrunRecipe) -> int | None:
    return read_whole(value, path, recipe, minimum=0)


def read_decimal_text(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    """Keep the number as text so the caller validates it as a Decimal, not a float."""
    text = None if isinstance(value, bool) else str(value).strip()
    if isinstance(value, int | float | str) and text:
        try:
            if Decimal(text).is_finite():
                return text
        except InvalidOperation:
            pass
    recipe._error(path, f"expected a number such as 0.85, got {shown_value(value)}")
    return None


def read_number(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if is_number and math.isfinite(value) and value >= 0:
        return value
    recipe._error(path, f"expected a number of at least 0, got {shown_value(value)}")
    return None


def read_boolean(value: object, path: str, recipe: SparkrunRecipe) -> bool | None:
    if isinstance(value, bool):
        return value
    recipe._error(path, f"expected true or false, got {shown_value(value)}")
    return None


def read_text(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    recipe._error(path, f"expected text, got {shown_value(value)}")
    return None


def choice_reader(table: dict[str, str], shown: tuple[str, ...]) -> Reader:
    def read(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            if key in table:
                return table[key]
        recipe._error(path, f"expected one of {', '.join(shown)}, got {shown_value(value)}")
        return None

    return read


read_kv_cache_dtype = choice_reader(
    KV_CACHE_DTYPES, ("auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")
)
read_weight_format = choice_reader(
    WEIGHT_FORMATS, ("bf16", "fp16", "fp32", "fp8", "int8", "nvfp4", "mxfp4", "int4")
)
read_checkpoint_kv_dtype = choice_reader(CHECKPOINT_KV_DTYPES, ("bf16", "fp16", "fp8"))


def read_quantization(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    # Passed through in vLLM's spelling: the form knows which methods the image supports.
    if isinstance(value, str):
        name = value.strip().lower()
        return QUANTIZATION_ALIASES.get(name, name)
    if value is None:
        return ""
    recipe._error(
        path, f"expected a vLLM quantization method such as modelopt_fp4, got {shown_value(value)}"
    )
    return None


def read_metadata_quantization(value: object, path: str, recipe: SparkrunRecipe) -> str | None:
    if isinstance(value, str) and value.strip().lower() in CHECKPOINT_DETECTED:
        return ""
    return read_quantization(value, path, recipe)


def removed_flag_reader(flag: str) -> Reader:
    """A key for a flag today's vLLM no longer has: not carried over, and the import says
    why (real vLLM would refuse the whole vector with 'unrecognized arguments')."""

    def read(value: object, path: str, recipe: SparkrunRecipe) -> None:
        recipe.ignored.append(
            f"{path} ({shown_value(value)}): not carried over — "
            + advice.for_flag(flag, vllm_contract.latest_version())
        )

    return read


def read_params(value: object, path: str, recipe: SparkrunRecipe) -> tuple[float, float] | None:
    """A mixture-of-experts count written "75B-A9B" (total, then active): both in billions;
    None when the value is not written that way (no error recorded)."""
    if not isinstance(value, str) or "-" not in value:
        return None
    total, _, active = value.strip().partition("-")
    if not active.upper().startswith("A"):
        return None
    scratch = SparkrunRecipe()
    pair = (read_billions(total, path, scratch), read_billions(active[1:], path, scratch))
    if scratch.errors or None in pair:
        return None
    return pair  # type: ignore[return-value]


def read_billions(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
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
            f"expected a parameter count such as '120B', '1.5T' or 120e9, got {shown_value(value)}",
        )
        return None
    return round(billions, 6)


def _scale_plain(number: float) -> float:
    # A bare number below a million cannot be a real parameter count: it is billions.
    return number if number < 1e6 else number / 1e9


def read_gigabytes(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    number = read_number(value, path, recipe)
    if number is None:
        return None
    if number == 0:
        recipe._error(path, "expected the weight size in GB, got 0")
        return None
    return float(number)
