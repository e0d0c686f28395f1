"""A sparkrun recipe registry (sparkrun 0.4, core/registry.py): a git repository whose
`.sparkrun/registry.yaml` names one or more registries, each a folder of recipes
(`recipes:`, default `recipes`; every `*.yaml`/`*.yml` below it, hidden folders skipped, the
recipe named by its file's stem, `.yaml` winning over `.yml`) and a folder of mods. Without
a manifest the whole repository is one registry. `include:` makes a recipe a change to a
sibling one (merged by sparkrun's rules: mappings key by key, lists and scalars replaced, a
null deletes, `defaults` and `env` values whole, `overrides` appended). Pure Python: the
caller reads the files (git_adapter)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sparkdomain.bounded import DocumentError, clip, load_yaml

MANIFEST = ".sparkrun/registry.yaml"
MAX_INCLUDE_DEPTH = 8
MAX_RECIPES = 2_000


@dataclass(frozen=True)
class Section:
    name: str
    recipes: str  # folder ("" = the repository's root)
    mods: str
    visible: bool = True
    description: str = ""


def sections(manifest_text: str | None) -> list[Section]:
    """The registries a repository declares (one at its root when it has no manifest)."""
    if manifest_text is None:
        return [Section("", "", "mods")]
    try:
        doc = load_yaml(manifest_text)
    except DocumentError as exc:
        raise ValueError(f"{MANIFEST}: {exc}") from None
    entries = doc.get("registries") if isinstance(doc, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{MANIFEST}: expected `registries:`, a list of {{name, recipes}}")
    out = []
    for entry in entries[:32]:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        if entry.get("enabled") is False:
            continue
        folder = str(entry.get("recipes") or entry.get("subpath") or "recipes").strip("/")
        out.append(Section(
            name=clip(entry["name"], 60), recipes="" if folder in ("", ".") else folder,
            mods=str(entry.get("mods") or entry.get("mods_subpath") or "mods").strip("/"),
            visible=entry.get("visible") is not False,
            description=clip(entry.get("description") or "", 200),
        ))  # fmt: skip
    return out


def recipe_paths(files: list[str], section: Section) -> dict[str, str]:
    """stem-qualified name → path for the recipes of a section (its folder's YAML files,
    hidden folders skipped, `.yaml` over `.yml` for one stem in one folder)."""
    prefix = f"{section.recipes}/" if section.recipes else ""
    found: dict[str, str] = {}
    for path in sorted(files):
        if not path.startswith(prefix) or not path.endswith((".yaml", ".yml")):
            continue
        rel = path[len(prefix) :]
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        key = rel.rsplit(".", 1)[0]
        if key in found and found[key].endswith(".yaml"):
            continue
        found[key] = path
        if len(found) >= MAX_RECIPES:
            break
    return found


def merge(base: Mapping, outer: Mapping, top: bool = True) -> dict:
    """sparkrun's include merge of `outer` over `base`."""
    out = dict(base)
    for key, value in outer.items():
        if key == "include" and top:
            continue
        if value is None:
            out.pop(key, None)
        elif top and key == "overrides" and isinstance(value, list):
            out[key] = [*(base.get(key) or []), *value]
        elif top and key in ("defaults", "env") and isinstance(value, Mapping):
            inner = dict(base.get(key) or {}) if isinstance(base.get(key), Mapping) else {}
            for k, v in value.items():
                if v is None:
                    inner.pop(k, None)
                else:
                    inner[k] = v  # values are whole: a mapping replaces the base's
            out[key] = inner
        elif isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            out[key] = merge(base[key], value, top=False)
        else:
            out[key] = value
    return out


def resolve_includes(
    doc: Mapping, path: str, read: Callable[[str], str | None], depth: int = 0
) -> dict:
    """The recipe at `path` with its `include:` chain merged in (siblings by stem).
    Raises ValueError with the reason when the chain cannot be followed."""
    base_name = doc.get("include")
    if base_name is None:
        return dict(doc)
    if depth >= MAX_INCLUDE_DEPTH:
        raise ValueError(f"include: more than {MAX_INCLUDE_DEPTH} levels deep")
    if not isinstance(base_name, str) or "/" in base_name or base_name.startswith(("@", ".")):
        raise ValueError(
            f"include: {clip(base_name, 60)} — SparkPanel follows includes of a sibling recipe "
            "in the same registry folder (by its file name without .yaml)"
        )
    folder = posixpath.dirname(path)
    for suffix in (".yaml", ".yml"):
        sibling = posixpath.join(folder, base_name + suffix)
        text = read(sibling)
        if text is None:
            continue
        try:
            base = load_yaml(text)
        except DocumentError as exc:
            raise ValueError(f"include: {sibling}: {exc}") from None
        if not isinstance(base, Mapping):
            raise ValueError(f"include: {sibling} is not a recipe")
        return merge(resolve_includes(base, sibling, read, depth + 1), doc)
    raise ValueError(f"include: no recipe {clip(base_name, 60)} beside {clip(path, 120)}")
