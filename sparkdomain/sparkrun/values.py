"""Reading single values of a sparkrun recipe's name, description and metadata into
SparkPanel's vocabulary: whole numbers, text, the dtype and weight-format names, parameter
counts ("120B", "75B-A9B") and sizes. Each reader returns None after recording an error
against the value's key path. (The values vLLM is given are read from the command itself:
vector.py.)"""

from __future__ import annotations

import math
from collections.abc import Callable

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.recipe import SparkrunRecipe

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


def read_number(value: object, path: str, recipe: SparkrunRecipe) -> float | None:
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if is_number and math.isfinite(value) and value >= 0:
        return value
    recipe._error(path, f"expected a number of at least 0, got {shown_value(value)}")
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


read_weight_format = choice_reader(
    WEIGHT_FORMATS, ("bf16", "fp16", "fp32", "fp8", "int8", "nvfp4", "mxfp4", "int4")
)
read_checkpoint_kv_dtype = choice_reader(CHECKPOINT_KV_DTYPES, ("bf16", "fp16", "fp8"))


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
