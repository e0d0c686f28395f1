"""Container mods on the panel's side (docs/recipes.md, Mods): an admin adds a mod from a
registry's mirror or a folder on the panel's machine (a snapshot of its files), reviews the
files and approves it for some hosts; a start applies a recipe's mods only when every one is
approved for the host, and says plainly which one is missing otherwise.

What a mod is and its bounds: sparkdomain/mods.py. How it is applied (a build container from
the recipe's image, committed to a derived image the run then uses): the Docker engine
(apps/hosts/engines/docker_mods.py)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.audit import services as audit
from apps.hosts.models import Host
from apps.recipes.models import Recipe, RecipeRegistry
from apps.recipes.registries import RegistryError, registry_mod
from apps.runs.models import ApprovedMod
from sparkdomain import mods as rules
from sparkdomain.bounded import clip


class ModRefused(ValueError):
    """Why a mod cannot be added, or a recipe's mods not applied on a host."""

    def __init__(self, message: str, code: str = "mods_not_allowed") -> None:
        super().__init__(message)
        self.code = code


def encode(files: dict[str, bytes]) -> dict[str, str]:
    return {path: base64.b64encode(data).decode("ascii") for path, data in files.items()}


def decode(files: dict) -> dict[str, bytes]:
    return {str(path): base64.b64decode(data) for path, data in (files or {}).items()}


def folder_files(path: str) -> dict[str, bytes]:
    """A mod folder on the panel's machine, read whole and bounded (regular files only: a
    symbolic link is refused, never followed)."""
    root = Path(path)
    if not root.is_absolute() or ".." in root.parts:
        raise ModRefused(f"{clip(path, 120)}: give the folder's absolute path", "mod_source")
    allowed = [Path(p) for p in settings.MOD_FOLDERS]
    if not any(root.resolve().is_relative_to(p.resolve()) and root.resolve() != p.resolve()
               for p in allowed):  # fmt: skip
        shown = ", ".join(str(p) for p in allowed) or "none set"
        raise ModRefused(
            f"{clip(path, 120)} is not inside the mod folders of the panel's machine ({shown}; "
            "SPARKPANEL_MOD_FOLDERS): put the mod there, or add it from a registry",
            "mod_source",
        )
    if not root.is_dir() or root.is_symlink():
        raise ModRefused(f"{clip(path, 120)} is not a folder on the panel's machine", "mod_source")
    files: dict[str, bytes] = {}
    total = 0
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = Path(directory) / name
            rel = full.relative_to(root).as_posix()
            info = full.lstat()
            if not stat.S_ISREG(info.st_mode):
                raise ModRefused(f"{rel}: only plain files (no links or devices)", "mod_source")
            if len(files) >= rules.MAX_FILES or info.st_size > rules.MAX_FILE_BYTES:
                raise ModRefused(
                    f"{clip(path, 80)}: more than {rules.MAX_FILES} files, or {rel} is over "
                    f"{rules.MAX_FILE_BYTES // 1024} KiB", "mod_source",
                )  # fmt: skip
            total += info.st_size
            if total > rules.MAX_TOTAL_BYTES:
                raise ModRefused(f"{clip(path, 80)}: over 2 MiB of files", "mod_source")
            files[rel] = full.read_bytes()
    return files


@transaction.atomic
def add_mod(*, user, registry: RecipeRegistry | None = None, ref: str = "",
            folder: str = "") -> ApprovedMod:  # fmt: skip
    """Snapshot a mod's files (from a registry at its mirrored commit, or a folder) as a
    mod awaiting review; adding a mod of a known name again replaces its files and takes
    its approval away until it is reviewed again."""
    if registry is not None:
        try:
            name, files, where = registry_mod(registry, ref)
        except RegistryError as exc:
            raise ModRefused(str(exc), "mod_source") from None
    elif folder:
        files = folder_files(folder)
        name = rules.mod_name(ref or Path(folder).name)
        where = f"folder {clip(folder, 300)}"
    else:
        raise ModRefused("Choose a registry (and the mod's name) or a folder.", "mod_source")
    problem = rules.snapshot_problem(name, files)
    if problem:
        raise ModRefused(problem, "mod_source")
    digest = rules.bundle_digest(files)
    defaults = {"files": encode(files), "digest": digest, "source": where, "added_by": user}
    mod, created = ApprovedMod.objects.get_or_create(name=name, defaults=defaults)
    if not created and mod.digest != digest:
        mod.files, mod.digest, mod.source, mod.added_by = encode(files), digest, where, user
        mod.approved, mod.approved_by, mod.approved_at = False, None, None
        mod.save()
    elif not created:
        mod.source = where
        mod.save(update_fields=["source"])
    audit.record("mod.add", mod, user=user, after={"digest": digest, "source": where},
                 message=f"mod {name} added for review from {where}")  # fmt: skip
    return mod


def approve(mod: ApprovedMod, *, user, hosts: list[Host]) -> None:
    mod.approved, mod.approved_by, mod.approved_at = True, user, timezone.now()
    mod.save(update_fields=["approved", "approved_by", "approved_at"])
    mod.hosts.set(hosts)
    audit.record(
        "mod.approve",
        mod,
        user=user,
        after={"digest": mod.digest, "hosts": [h.name for h in hosts]},
        message=f"mod {mod.name} approved for {', '.join(h.name for h in hosts)}",
    )


def recipe_mods(recipe: Recipe) -> list[dict]:
    wanted = recipe.mods if isinstance(recipe.mods, list) else []
    return [m for m in wanted if isinstance(m, dict)]


def _what(mod: dict) -> str:
    return f"{mod.get('kind', 'mod')} {mod.get('name') or clip(mod.get('text') or '', 60)!r}"


def bundles_for(recipe: Recipe, host: Host, *, pair: bool = False) -> list[rules.ModBundle]:
    """The reviewed files of each of the recipe's mods, in its order, as `host` may apply
    them; ModRefused (saying which and what to do) when it may not apply them all."""
    wanted = recipe_mods(recipe)
    if not wanted:
        return []
    # A `patches:` list names what the image was built with: sparkrun does not apply it.
    wanted = [m for m in wanted if m.get("kind") != "patch"]
    if not wanted:
        return []
    other = [m for m in wanted if m.get("kind") != "mod"]
    if other:
        shown = ", ".join(_what(m) for m in other[:3])
        raise ModRefused(
            f"“{recipe.name}” wants {shown}: shell steps around vLLM are code SparkPanel never "
            "runs (only reviewed sparkrun mods are applied). Build them into an image on the "
            "host's allowlist, or into a mod an admin approves, and remove them from the "
            "recipe (docs/recipes.md, Mods)."
        )
    if host.engine != Host.Engine.DOCKER:
        raise ModRefused(
            f"“{recipe.name}” wants mods, and {host.name} runs its server as a local process: "
            "a mod is applied to the recipe's image, so only a Docker host applies mods."
        )
    if pair:
        raise ModRefused(
            f"“{recipe.name}” wants mods, and it runs on a pair: SparkPanel applies mods on "
            "one Spark only for now (not done yet: docs/recipes.md, Mods)."
        )
    names = [rules.mod_name(m.get("name") or "") for m in wanted]
    approved = {
        m.name: m for m in ApprovedMod.objects.filter(name__in=names, approved=True, hosts=host)
    }
    missing = [n for n in names if n not in approved]
    if missing:
        known = set(ApprovedMod.objects.filter(name__in=missing).values_list("name", flat=True))
        why = "; ".join(
            f"{n}: " + ("added but not approved for this host" if n in known else "not added")
            for n in missing[:4]
        )
        raise ModRefused(
            f"“{recipe.name}” wants mod {', '.join(missing[:4])}: code that runs in its "
            f"container before vLLM, and {host.name} does not allow it ({why}). An admin "
            "adds the mod from its registry or a folder, reviews its files and approves it "
            f"for {host.name} (Django admin → Approved mods; docs/recipes.md, Mods)."
        )
    out = []
    for name in names:
        mod = approved[name]
        files = decode(mod.files)
        if rules.bundle_digest(files) != mod.digest:  # never run what was not reviewed
            raise ModRefused(f"the stored files of mod {name} do not match what was approved")
        out.append(rules.ModBundle(name=name, files=files))
    return out


def approvals(recipe: Recipe) -> list[dict]:
    """For the recipe's page: each mod it wants, and where it may run."""
    wanted = recipe_mods(recipe)
    names = [rules.mod_name(m.get("name") or "") for m in wanted if m.get("kind") == "mod"]
    found = {
        m.name: m for m in ApprovedMod.objects.filter(name__in=names).prefetch_related("hosts")
    }
    out = []
    for item in wanted:
        if item.get("kind") == "patch":
            out.append({"what": _what(item), "state": "kept, not applied (as in sparkrun)",
                        "hosts": []})  # fmt: skip
            continue
        if item.get("kind") != "mod":
            out.append({"what": _what(item), "state": "never run", "hosts": []})
            continue
        name = rules.mod_name(item.get("name") or "")
        mod = found.get(name)
        if mod is None:
            out.append({"what": _what(item), "state": "not added", "hosts": []})
        elif not mod.approved:
            out.append({"what": _what(item), "state": "added, awaiting review", "hosts": []})
        else:
            hosts = [h.name for h in mod.hosts.all()]
            state = "approved" if hosts else "approved for no host"
            out.append({"what": _what(item), "state": state, "hosts": hosts})
    return out
