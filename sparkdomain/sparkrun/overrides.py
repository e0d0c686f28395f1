"""sparkrun 0.4's `overrides:` (core/recipe_overrides.py): conditional layers of `defaults`,
`env` or `container`, each applied when its `when` holds for the launch — judged here for
what SparkPanel runs: a DGX Spark (GB10, sm_121, 121 GB the GPU sees, unified memory), one
Spark or a pair by the recipe's own parallelism, runtime vLLM. As in sparkrun, an unknown
selector or operator makes an entry not match, a `config:` selector reads the declared
defaults, and later entries win."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sparkdomain.bounded import clip
from sparkdomain.sparkrun.recipe import SparkrunRecipe

_SHAPE = {"tp": "tensor_parallel", "pp": "pipeline_parallel", "dp": "data_parallel",
          "ep": "expert_parallel", "cp": "context_parallel"}  # fmt: skip
_HARDWARE = {
    "platform": "dgx-spark", "vendor": "nvidia", "accelerator": "gb10", "arch": "sm_121",
    "capability": frozenset({"unified-memory"}), "memory_gb": 121.0,
}  # fmt: skip
_UNORDERED = {"runtime", "runtime_family", "platform", "vendor", "accelerator", "arch",
              "capability"}  # fmt: skip
_OPERATORS = {"eq", "ne", "in", "not_in", "gt", "gte", "lt", "lte"}
FORBIDDEN_DEFAULTS = frozenset({"port", "served_model_name", *_SHAPE.values()})
_ARCH = re.compile(r"^sm_?(\d+)[a-z]?$")
MAX_OVERRIDES = 64


def _whole(value: object) -> int:
    try:
        return max(int(value), 1)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return 1


def _norm(selector: str, value: object) -> object:
    if value is None:
        return None
    if selector == "arch":
        text = str(value).strip().lower()
        found = _ARCH.match(text)
        if found:
            return f"sm_{found.group(1)}"
        if re.fullmatch(r"\d+\.\d+", text):
            return "sm_" + text.replace(".", "")
        return text
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return text.lower()


def _test(selector: str, op: str, operand: object, actual: object, absent: bool) -> bool:
    if actual is None:
        return absent and op in ("ne", "not_in")
    if isinstance(actual, frozenset):
        have = {_norm(selector, v) for v in actual}
        wanted = {_norm(selector, v) for v in (operand if isinstance(operand, list) else [operand])}
        return bool(have & wanted) if op in ("eq", "in") else (
            not have & wanted if op in ("ne", "not_in") else False)  # fmt: skip
    a = _norm(selector, actual)
    if op in ("eq", "ne", "in", "not_in"):
        candidates = operand if op in ("in", "not_in") and isinstance(operand, list) else [operand]
        hit = any(
            isinstance(a, bool) == isinstance(c, bool) and a == c
            for c in (_norm(selector, x) for x in candidates)
        )
        return hit if op in ("eq", "in") else not hit
    b = _norm(selector, operand)
    if selector in _UNORDERED or not isinstance(a, float) or not isinstance(b, float):
        return False
    return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]


def _predicates(value: object) -> list[tuple[str, object]]:
    if isinstance(value, Mapping):
        return [(str(op), operand) for op, operand in value.items()]
    if isinstance(value, list):
        return [("in", value)]
    return [("eq", value)]


def _holds(when: Mapping, shape: dict, declared: Mapping) -> tuple[bool, str]:
    for selector, value in when.items():
        if selector == "config":
            if not isinstance(value, Mapping):
                return False, "config: expected a mapping"
            for key, predicate in value.items():
                preds = _predicates(predicate)
                if any(op not in _OPERATORS for op, _ in preds):
                    return False, f"config.{key}: unknown operator"
                actual = declared.get(str(key))
                if not all(_test(f"config.{key}", op, x, actual, True) for op, x in preds):
                    return False, f"config.{clip(key, 40)} did not match"
            continue
        if selector in _SHAPE or selector in ("nodes", "gpus_per_node"):
            actual: object = shape[selector]
        elif selector in ("runtime", "runtime_family"):
            actual = "vllm"
        elif selector in _HARDWARE:
            actual = _HARDWARE[selector]
        else:
            return False, f"unknown selector {clip(selector, 40)!r}"
        preds = _predicates(value)
        if any(op not in _OPERATORS for op, _ in preds):
            return False, f"{selector}: unknown operator"
        if not all(_test(selector, op, x, actual, False) for op, x in preds):
            return False, f"{selector}={actual if not isinstance(actual, frozenset) else '…'}"
    return True, ""


def apply_overrides(raw: object, defaults: dict, env: dict, recipe: SparkrunRecipe) -> str | None:
    """Apply the entries that hold on a Spark to `defaults` and `env` in place; returns the
    container an entry sets (None: unchanged). Problems go to `recipe`."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        recipe._error("overrides", "expected a list of {when: ..., defaults: ...} entries")
        return None
    declared = dict(defaults)
    shape = {long: _whole(declared.get(long, 1)) for long in _SHAPE.values()}
    shape = {short: shape[long] for short, long in _SHAPE.items()}
    shape["nodes"] = shape["tp"] * shape["pp"] * shape["dp"]
    shape["gpus_per_node"] = 1
    container = None
    for index, entry in enumerate(raw[:MAX_OVERRIDES]):
        path = f"overrides[{index}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("when"), Mapping) \
                or not entry["when"]:  # fmt: skip
            recipe._error(path, "each entry needs a non-empty `when:` mapping")
            continue
        unknown = set(map(str, entry)) - {"when", "defaults", "env", "container"}
        if unknown:
            recipe._error(path, f"sparkrun refuses key(s) {', '.join(sorted(unknown))[:120]}")
            continue
        layer = entry.get("defaults") or {}
        forbidden = sorted(set(map(str, layer)) & FORBIDDEN_DEFAULTS) if isinstance(
            layer, Mapping) else []  # fmt: skip
        if forbidden:
            recipe._error(path, f"an override may not set {', '.join(forbidden)} (sparkrun)")
            continue
        holds, why = _holds(entry["when"], shape, declared)
        if not holds:
            recipe.ignored.append(f"{path}: not applied on a Spark ({why}).")
            continue
        if isinstance(layer, Mapping):
            defaults.update({str(k): v for k, v in layer.items()})
        if isinstance(entry.get("env"), Mapping):
            env.update({str(k): v for k, v in entry["env"].items()})
        if isinstance(entry.get("container"), str):
            container = entry["container"]
        recipe.ignored.append(f"{path}: applied (its `when` holds on a DGX Spark).")
    if len(raw) > MAX_OVERRIDES:
        recipe._error("overrides", f"more than {MAX_OVERRIDES} entries")
    return container
