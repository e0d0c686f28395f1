"""A recipe as a sparkrun recipe (issue 39): YAML that sparkrun 0.4 loads and renders into
the same `vllm serve` command the panel runs — the panel's own vector in `command:`, with
only the model, address and port left as sparkrun's placeholders — and that the panel's
importer reads back into the same recipe (sparkdomain/sparkrun/importer.py).

Pure Python: the caller passes the recipe (its fields) and the vector
(`sparkdomain/command.py::serve_argv`, without an address or a port)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import yaml

PORT = 8000
HOST = "0.0.0.0"  # noqa: S104 — what sparkrun's container listens on (it publishes the port)
_WRAP = 88


def _literal(token: str, escaped: bool) -> str:
    text = shlex.quote(token)
    return text.replace("{", "{{").replace("}", "}}") if escaped else text


def command_text(argv: list[str], before: list[str] = ()) -> str:
    """`vllm serve {model} --host {host} --port {port} <the rest of argv>`, one option per
    line, after the shell steps the recipe runs first (`before`, joined by &&). A brace in a
    value is doubled (and then every one is): sparkrun reads `{{` as a literal brace once a
    command has one, so no value is ever taken for a placeholder."""
    rest = argv[3:]
    escaped = any("{" in t or "}" in t for t in [*rest, *before])
    steps = [s.replace("{", "{{").replace("}", "}}") if escaped else s for s in before]
    lines = [*(f"{s} &&" for s in steps), "vllm serve {model}", "--host {host} --port {port}"]
    for token in rest:
        if token.startswith("-") and not token[1:2].isdigit():
            lines.append(_literal(token, escaped))
        else:
            lines[-1] += " " + _literal(token, escaped)
    return " \\\n  ".join(lines) + "\n"


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    return value


def _billions(value: float | None) -> str | None:
    return None if value is None else f"{value:g}B"


def to_sparkrun(recipe: Any, argv: list[str]) -> dict:
    """The sparkrun recipe mapping for a recipe and its vector."""
    source = recipe.source if isinstance(getattr(recipe, "source", None), Mapping) else {}
    metadata: dict[str, Any] = dict(source.get("metadata") or {})
    if recipe.description:
        metadata["description"] = recipe.description
    planner = {
        "model_params": _billions(recipe.total_params_b),
        "active_params": _billions(recipe.active_params_b),
        "model_dtype": recipe.weight_format or None,
        "kv_dtype": recipe.checkpoint_kv_dtype or None,
        "num_layers": recipe.num_layers,
        "attention_layers": recipe.attention_layers,
        "num_kv_heads": recipe.kv_heads,
        "head_dim": recipe.head_dim,
        "model_vram": recipe.weight_gb,
    }
    metadata.update({k: v for k, v in planner.items() if v is not None})
    doc: dict[str, Any] = {"recipe_version": "2", "name": recipe.name, "model": recipe.model_id}
    if getattr(recipe, "revision", ""):
        doc["model_revision"] = recipe.revision
    doc["runtime"] = "vllm"
    doc["container"] = recipe.image
    doc["metadata"] = metadata
    if source.get("maintainer"):
        doc["maintainer"] = source["maintainer"]
    mods = recipe.mods if isinstance(getattr(recipe, "mods", None), list) else []
    for key, kinds in (("mods", {"mod"}), ("patches", {"patch"})):
        names = [m["name"] for m in mods if m.get("kind") in kinds and m.get("name")]
        if names:
            doc[key] = names
    # The folders the command reads, mounted from where the recipe's source had them.
    folders = getattr(recipe, "folders", None) or []
    volumes = [f"{f['source']}:{f['path']}:ro" for f in folders if f.get("source")]
    if volumes:
        doc["volumes"] = volumes
    steps = [m["text"] for m in mods if m.get("kind") == "pre_exec" and m.get("text")]
    if steps:
        doc["pre_exec"] = steps
    before = [m["text"] for m in mods if m.get("kind") == "command" and m.get("text")]
    after = [m["text"] for m in mods if m.get("kind") == "post_exec" and m.get("text")]
    if after:
        doc["post_exec"] = after
    defaults: dict[str, Any] = {"port": PORT, "host": HOST}
    # sparkrun places a recipe by its defaults (tensor × pipeline × data parallel nodes).
    defaults["tensor_parallel"] = recipe.tensor_parallel_size or 1
    if (getattr(recipe, "pipeline_parallel_size", 1) or 1) > 1:
        defaults["pipeline_parallel"] = recipe.pipeline_parallel_size
    defaults["gpu_memory_utilization"] = _number(recipe.gpu_memory_utilization)
    if recipe.served_model_name:  # the first name; the command carries them all
        defaults["served_model_name"] = recipe.served_model_name.split()[0]
    doc["defaults"] = defaults
    if getattr(recipe, "env", None):
        doc["env"] = {str(k): str(v) for k, v in recipe.env.items()}
    doc["command"] = command_text(argv, before)
    return doc


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def sparkrun_yaml(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
