"""Reading config.json and hf_quant_config.json: the bounded JSON parse, the language model
inside a multimodal config, and the typed reads of single values (a broken value is a
ConfigImportError naming its key)."""

from __future__ import annotations

from collections.abc import Mapping

from sparkdomain.bounded import DocumentError, clip, load_json

NESTED_LANGUAGE_KEYS = ("text_config", "llm_config", "language_config")
LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


class ConfigImportError(ValueError):
    """A config that cannot be read at all; the message is shown to the user as is."""


def load_object(source: str | bytes | Mapping[str, object], name: str) -> dict[str, object]:
    """Parse text or bytes as JSON and insist on an object, naming the file in errors."""
    if isinstance(source, Mapping):
        return dict(source)
    if not isinstance(source, str | bytes | bytearray):
        raise ConfigImportError(f"{name} must be JSON text, got {type(source).__name__}.")
    try:
        # Bytes too: load_json checks the size before decoding (UTF-8, a BOM allowed).
        parsed = load_json(source, what=name)
    except DocumentError as exc:
        raise ConfigImportError(str(exc)) from None
    if not isinstance(parsed, dict):
        raise ConfigImportError(
            f"{name} must be a JSON object ({{...}}), but it is a {_json_kind(parsed)}."
        )
    return parsed


def _json_kind(value: object) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def language_model(root: dict[str, object]) -> tuple[dict[str, object], str]:
    """Multimodal configs nest the text model; its layers are the ones that keep KV."""
    for key in NESTED_LANGUAGE_KEYS:
        nested = root.get(key)
        if isinstance(nested, dict) and (_has_layer_count(nested) or not _has_layer_count(root)):
            return nested, key
    return root, ""


def _has_layer_count(cfg: Mapping[str, object]) -> bool:
    return any(cfg.get(key) is not None for key in LAYER_COUNT_KEYS) or isinstance(
        cfg.get("hybrid_override_pattern"), str
    )


def as_mapping(value: object) -> dict[str, object] | None:
    return value if isinstance(value, dict) else None


def whole_number(cfg: Mapping[str, object], key: str) -> int | None:
    """A whole number or None when absent/null; anything else is a broken config."""
    value = cfg.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigImportError(
            f"'{key}' in config.json must be a whole number of at least 0, got {clip(value)}."
        )
    return value


def first_whole_number(cfg: Mapping[str, object], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = whole_number(cfg, key)
        if value is not None:
            return value
    return None
