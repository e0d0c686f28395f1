"""Container mods (sparkrun's and eugr's `mods:`): what one is, bounded, as the panel keeps
and applies it. Pure Python, no Django, no Docker.

A mod is a folder with a `run.sh` (and the files it uses: patches, templates, Python) that
runs inside the recipe's image before vLLM starts — it patches vLLM's code or drops a chat
template into the working directory (sparkrun copies it to `/workspace/mods/<name>` and runs
`./run.sh` there with `WORKSPACE_DIR` set to the container's working directory). That is
code from outside the image, so SparkPanel applies a mod only when an admin has reviewed a
snapshot of its files and approved it for the host (apps/hosts/models.py::ApprovedMod); the
snapshot, not the source, is what runs, so a registry that changes later changes nothing
until it is approved again.

Here: the name rule (a recipe's `mods/fix-x` and `fix-x` are one mod, as in sparkrun), the
bounds of a snapshot (files, sizes, paths), its digest, and the tar archive the Docker engine
puts into the build container.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass

CONTAINER_MODS_DIR = "/workspace/mods"  # sparkrun's _CONTAINER_MODS_BASE
MAX_FILES = 64
MAX_FILE_BYTES = 512 * 1024
MAX_TOTAL_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 8
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z", re.ASCII)
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}\Z", re.ASCII)


class ModError(ValueError):
    """A mod that cannot be kept or applied, in words an admin can act on."""


def mod_name(ref: str) -> str:
    """The mod a recipe's `mods:` entry names: sparkrun strips one leading `mods/`, and the
    folder's own name is the mod's (`@registry/mods/fix-x` and `fix-x` are `fix-x`)."""
    ref = str(ref).strip().strip("/")
    if ref.startswith("@"):
        ref = ref.partition("/")[2]
    return posixpath.basename(ref.removeprefix("mods/")) or ref


def name_problem(name: str) -> str | None:
    if not NAME.match(name or ""):
        return (f"{str(name)[:60]!r}: a mod's name is its folder's: letters, digits, '.', '_' "
                "and '-', up to 100 characters")  # fmt: skip
    return None


def path_problem(path: str) -> str | None:
    """Why `path` cannot be a file of a mod (relative, plain parts, not too deep)."""
    parts = path.split("/")
    if path.startswith("/") or len(parts) > MAX_DEPTH or not all(_PART.match(p) for p in parts):
        return (f"{path[:120]!r}: a mod's files are relative paths of plain names (letters, "
                f"digits, '.', '_', '-', '+'; no '..'), at most {MAX_DEPTH} deep")  # fmt: skip
    if any(p in (".", "..") or set(p) == {"."} for p in parts):
        return f"{path[:120]!r}: no '.' or '..' parts"
    return None


@dataclass(frozen=True)
class ModBundle:
    """One mod's reviewed files, ready to run: `files` maps a relative path to its bytes."""

    name: str
    files: Mapping[str, bytes]

    @property
    def digest(self) -> str:
        return bundle_digest(self.files)

    def archive(self) -> bytes:
        """A tar of `workspace/mods/<name>/…` (to put at `/` in the build container): every
        file owned by root, `run.sh` executable, the rest read-only."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            top = f"{CONTAINER_MODS_DIR.strip('/')}/{self.name}"
            dirs = {top, *(posixpath.dirname(f"{top}/{p}") for p in self.files)}
            for directory in sorted(_with_parents(dirs)):
                info = tarfile.TarInfo(directory)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for path in sorted(self.files):
                data = bytes(self.files[path])
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size = len(data)
                info.mode = 0o755 if path == "run.sh" or path.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
        return out.getvalue()


def _with_parents(dirs: set[str]) -> set[str]:
    out = set()
    for directory in dirs:
        while directory and directory not in out:
            out.add(directory)
            directory = posixpath.dirname(directory)
    return out


def bundle_digest(files: Mapping[str, bytes]) -> str:
    """sha256 over the sorted paths and contents: the snapshot an admin approved."""
    digest = hashlib.sha256()
    for path in sorted(files):
        data = bytes(files[path])
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def snapshot_problem(name: str, files: Mapping[str, bytes]) -> str | None:
    """Why these files are not a mod the panel can keep (None: they are)."""
    problem = name_problem(name)
    if problem:
        return problem
    if "run.sh" not in files:
        return f"{name}: a mod is a folder with a run.sh, and this one has none"
    if len(files) > MAX_FILES:
        return f"{name}: more than {MAX_FILES} files"
    total = 0
    for path, data in files.items():
        problem = path_problem(path)
        if problem:
            return f"{name}: {problem}"
        if len(data) > MAX_FILE_BYTES:
            return f"{name}: {path} is over {MAX_FILE_BYTES // 1024} KiB"
        total += len(data)
    if total > MAX_TOTAL_BYTES:
        return f"{name}: the files are over {MAX_TOTAL_BYTES // (1024 * 1024)} MiB in all"
    return None


# How a derived image is built (apps/hosts/engines/docker_mods.py): part of its tag, so a
# change to the build never reuses an image an older build made.
BUILD = "2"  # 2: the derived image keeps the base's entrypoint and command


def derived_tag(base_image_id: str, bundles: list[ModBundle]) -> str:
    """The tag of the image `bundles` make of a base image: the same base, the same
    reviewed files and the same build always give the same tag (built once per host)."""
    digest = hashlib.sha256(f"{BUILD}\0{base_image_id}".encode())
    for bundle in bundles:
        digest.update(f"\0{bundle.name}\0{bundle.digest}".encode())
    return digest.hexdigest()[:24]


def shown(text: bytes, limit: int = 20_000) -> str:
    """A file's text for review (binary files say so)."""
    try:
        decoded = bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        return f"(binary, {len(text)} bytes)"
    return decoded if len(decoded) <= limit else decoded[:limit] + "\n… (cut)"
