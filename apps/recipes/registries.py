"""Recipe registries (issue 39): an admin adds a sparkrun registry (a git URL or a local
checkout); the panel mirrors it (git_adapter), lists its recipes with their metadata, imports
one with its provenance (registry, path, commit, the file's blob), and shows when the
registry holds a newer version of an imported recipe — the command's diff, then update or
keep (docs/recipes.md, Registries)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.conf import settings
from django.utils import timezone

from apps.audit import services as audit
from apps.recipes.models import Recipe, RecipeRegistry
from apps.recipes.yaml_io import ImportResult, recipes_from_yaml
from git_adapter import GitError, Mirror, url_problem
from sparkdomain import mods
from sparkdomain.bounded import DocumentError, clip, load_yaml
from sparkdomain.command import UnsafeCommand, serve_argv
from sparkdomain.flags import format_extra_args
from sparkdomain.sparkrun import SparkrunImportError, looks_like_sparkrun, parse_sparkrun
from sparkdomain.sparkrun import registry as layout


class RegistryError(ValueError):
    """What went wrong, in one sentence for the page."""


def mirror_of(registry: RecipeRegistry) -> Mirror:
    return Mirror(Path(settings.VAR_DIR) / "registries" / f"{registry.pk}.git")


def registry_add(*, name: str, url: str, user) -> RecipeRegistry:
    problem = url_problem(url)
    if problem:
        raise RegistryError(problem)
    if RecipeRegistry.objects.filter(name=name).exists():
        raise RegistryError(f"A registry named {name} exists already.")
    registry = RecipeRegistry.objects.create(name=name, url=url.strip(), added_by=user)
    audit.record("registry.add", registry, user=user, after={"url": registry.url})
    registry_fetch(registry)
    return registry


def registry_fetch(registry: RecipeRegistry) -> RecipeRegistry:
    """Bring the mirror up to the source's default branch; the error is kept for the page."""
    try:
        registry.commit = mirror_of(registry).fetch(registry.url)
        registry.error = ""
    except GitError as exc:
        registry.error = str(exc)
    registry.fetched_at = timezone.now()
    registry.save(update_fields=["commit", "error", "fetched_at"])
    return registry


@dataclass
class Listed:
    """One recipe file of a registry at its commit, as the registry page shows it."""

    section: str
    name: str
    path: str
    model: str = ""
    description: str = ""
    runtime: str = ""
    importable: bool = False
    problem: str = ""
    imported: list[Recipe] = field(default_factory=list)
    update: list[Recipe] = field(default_factory=list)  # imported recipes the file changed


def _reader(mirror: Mirror, commit: str):
    def read(path: str) -> str | None:
        try:
            return mirror.read(commit, path)
        except GitError:
            return None

    return read


def _document(mirror: Mirror, commit: str, path: str) -> dict:
    """The recipe at `path`, its includes merged in."""
    try:
        doc = load_yaml(mirror.read(commit, path))
    except (GitError, DocumentError) as exc:
        raise RegistryError(str(exc)) from None
    if not isinstance(doc, dict):
        raise RegistryError(f"{path} is not a recipe (a YAML mapping)")
    try:
        return layout.resolve_includes(doc, path, _reader(mirror, commit))
    except ValueError as exc:
        raise RegistryError(str(exc)) from None


def _layout(mirror: Mirror, commit: str) -> tuple[list[str], list[layout.Section]]:
    """The files at `commit` and the registries its `.sparkrun/registry.yaml` declares."""
    files = mirror.files(commit)
    manifest = mirror.read(commit, layout.MANIFEST) if layout.MANIFEST in files else None
    return files, layout.sections(manifest)


def registry_recipes(registry: RecipeRegistry) -> list[Listed]:
    """Every recipe file of the registry at its commit, with what the panel imported."""
    if not registry.commit:
        return []
    mirror = mirror_of(registry)
    try:
        files, sections = _layout(mirror, registry.commit)
    except (GitError, ValueError) as exc:
        raise RegistryError(str(exc)) from None
    imported: dict[str, list[Recipe]] = {}
    for recipe in Recipe.objects.filter(source__registry=registry.name):
        imported.setdefault(recipe.source.get("path", ""), []).append(recipe)
    out: list[Listed] = []
    for section in sections:
        for name, path in layout.recipe_paths(files, section).items():
            row = Listed(
                section=section.name, name=name, path=path, imported=imported.get(path, [])
            )
            try:
                doc = _document(mirror, registry.commit, path)
            except RegistryError as exc:
                row.problem = str(exc)
                out.append(row)
                continue
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
            row.model = clip(doc.get("model") or "", 120)
            row.description = clip(doc.get("description") or meta.get("description") or "", 300)
            row.runtime = clip(doc.get("runtime") or "", 40)
            row.importable = looks_like_sparkrun(doc)
            if row.imported:
                blob = _blob(mirror, registry.commit, path)
                row.update = [
                    r
                    for r in row.imported
                    if blob and blob not in (r.source.get("blob"), r.source.get("kept_blob"))
                ]
            out.append(row)
    return out


def _blob(mirror: Mirror, commit: str, path: str) -> str:
    try:
        return mirror.blob(commit, path)
    except GitError:
        return ""


def registry_import(
    registry: RecipeRegistry, path: str, *, user, replace: bool = False
) -> ImportResult:
    """Import the recipe at `path` (and its variants), with its provenance."""
    mirror = mirror_of(registry)
    if not registry.commit:
        raise RegistryError("Fetch the registry first.")
    doc = _document(mirror, registry.commit, path)
    provenance = {
        "registry": registry.name,
        "path": path,
        "commit": registry.commit,
        "blob": _blob(mirror, registry.commit, path),
    }
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    result = recipes_from_yaml(
        yaml.safe_dump(doc, sort_keys=False, allow_unicode=True),
        replace=replace,
        user=user,
        name_hint=stem,
        provenance=provenance,
    )
    if result.ok:
        for recipe in [*result.created, *result.updated]:
            audit.record("recipe.import", recipe, user=user, after=provenance)
    return result


def _vector(fields: dict) -> list[str]:
    """The vector a parsed recipe's fields give: an unsaved recipe (the model's defaults for
    what the file leaves), as a start would build it."""
    names = {f.name for f in Recipe._meta.get_fields()}
    try:
        return serve_argv(Recipe(**{k: v for k, v in fields.items() if k in names}))
    except (UnsafeCommand, ValueError, ArithmeticError) as exc:
        return [f"(cannot be built: {exc})"]


def _lines(argv: list[str]) -> list[str]:
    """One option per line, as the recipe form's extra arguments show them."""
    return format_extra_args(argv).splitlines()


def update_diff(registry: RecipeRegistry, recipe: Recipe) -> list[str]:
    """The command's diff from the version a recipe was imported at to the registry's
    (unified, one option per line), plus the other keys that changed."""
    mirror = mirror_of(registry)
    path, old_commit = recipe.source.get("path", ""), recipe.source.get("commit", "")
    variant = recipe.source.get("variant")
    versions = []
    for commit in (old_commit, registry.commit):
        try:
            parsed = parse_sparkrun(
                _document(mirror, commit, path), name_hint=path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            )
        except (RegistryError, SparkrunImportError) as exc:
            versions.append(([f"(cannot be read: {exc})"], {}))
            continue
        if variant:
            parsed = dict(parsed.variants).get(variant, parsed)
        versions.append((_lines(_vector(parsed.fields)), parsed.fields))
    (old, old_fields), (new, new_fields) = versions
    diff = list(
        difflib.unified_diff(
            old,
            new,
            f"{path}@{old_commit[:12]}",
            f"{path}@{registry.commit[:12]}",
            lineterm="",
            n=1,
        )
    )
    for key in ("image", "env", "mods", "total_params_b", "active_params_b", "weight_format"):
        if old_fields.get(key) != new_fields.get(key):
            diff.append(f"{key}: {clip(old_fields.get(key), 80)} → {clip(new_fields.get(key), 80)}")
    return diff


def update_keep(registry: RecipeRegistry, recipe: Recipe, *, user) -> None:
    """Keep the recipe as it is: this version of the file is no longer offered."""
    recipe.source = {
        **recipe.source,
        "kept_blob": _blob(mirror_of(registry), registry.commit, recipe.source.get("path", "")),
    }
    recipe.save(update_fields=["source", "updated_at"])
    audit.record("recipe.keep", recipe, user=user, after={"commit": registry.commit})


def registry_mod(registry: RecipeRegistry, ref: str) -> tuple[str, dict[str, bytes], str]:
    """The files of one mod in the registry at its mirrored commit — `<mods folder>/<name>/`
    of each registry the repository declares (sparkrun's `mods_subpath`, default `mods`) —
    as (name, files, where it was read). RegistryError when there is none or it is too big."""
    name = mods.mod_name(ref)
    problem = mods.name_problem(name)
    if problem:
        raise RegistryError(problem)
    if not registry.commit:
        raise RegistryError(f"{registry.name} has not been fetched yet")
    mirror = mirror_of(registry)
    try:
        _files, sections = _layout(mirror, registry.commit)
        folders = list(dict.fromkeys(s.mods for s in sections))
        for folder in folders:
            under = f"{folder}/{name}" if folder else name
            paths = mirror.files(registry.commit, under)
            if f"{under}/run.sh" not in paths:
                continue
            if len(paths) > mods.MAX_FILES:
                raise RegistryError(f"{name}: more than {mods.MAX_FILES} files")
            read = {
                p[len(under) + 1 :]: mirror.read_bytes(registry.commit, p, mods.MAX_FILE_BYTES)
                for p in paths
            }
            where = f"registry {registry.name} at {registry.commit[:12]}: {under}/"
            return name, read, where
    except (GitError, ValueError) as exc:
        raise RegistryError(str(exc)) from None
    looked = ", ".join(f"{folder or '.'}/{name}/" for folder in folders)
    raise RegistryError(
        f"{registry.name} has no mod {name} (looked for run.sh in {looked} at "
        f"{registry.commit[:12]})"
    )
