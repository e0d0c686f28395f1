"""The repositories hubsim serves: one folder per repository under a root.

    ROOT/<org>/<name>/repo.json    access (private, gated, tokens), refs, commits
    ROOT/<org>/<name>/blobs/<id>   file contents, content-addressed (LFS files by their
                                   sha256, the others by their git blob sha1)

A commit maps each file path to its blob. `publish` writes a new commit on a branch (the
previous commit stays reachable by its hash, as on the Hub); files may be bytes, a path
to copy, or an int: a sparse file of that many zero bytes (large downloads without the
disk). Commit hashes are 40 hex digits derived from the content, so the same publish gives
the same hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

# Suffixes the Hub stores through Git LFS (its default .gitattributes), and a size above
# which any file is.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
LFS_MIN_BYTES = 10 * 1024 * 1024
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
_CHUNK = 1024 * 1024


class StoreError(ValueError):
    pass


@dataclass(frozen=True)
class File:
    path: str
    size: int
    blob: Path  # where the content is on disk
    git_oid: str  # the git blob sha1 (of the LFS pointer for an LFS file)
    sha256: str | None  # LFS files: the content's sha256 (their ETag on the Hub)

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        return self.sha256 or self.git_oid


@dataclass(frozen=True)
class Repo:
    repo_id: str
    folder: Path
    private: bool
    gated: str | bool  # False, "auto" or "manual" (as the Hub's API says)
    tokens: frozenset[str]  # tokens with access (private: owners; gated: accepted)
    refs: dict[str, str]
    commits: dict[str, dict]

    def resolve(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None

    def files(self, commit: str) -> list[File]:
        entries = self.commits[commit]["files"]
        return [self._file(path, entry) for path, entry in sorted(entries.items())]

    def file(self, commit: str, path: str) -> File | None:
        entry = self.commits[commit]["files"].get(path)
        return None if entry is None else self._file(path, entry)

    def _file(self, path: str, entry: dict) -> File:
        return File(path=path, size=entry["size"], blob=self.folder / "blobs" / entry["blob"],
                    git_oid=entry["git_oid"], sha256=entry.get("sha256"))  # fmt: skip

    def date(self, commit: str) -> str:
        return self.commits[commit]["date"]


def repo_folder(root: Path, repo_id: str) -> Path:
    if not REPO_ID.match(repo_id) or ".." in repo_id:
        raise StoreError(f"not a repository id: {repo_id!r} (org/name)")
    return Path(root) / repo_id


def load(root: Path, repo_id: str) -> Repo | None:
    try:
        folder = repo_folder(root, repo_id)
    except StoreError:
        return None
    try:
        data = json.loads((folder / "repo.json").read_text())
    except FileNotFoundError:
        return None
    return Repo(repo_id=repo_id, folder=folder, private=data.get("private", False),
                gated=data.get("gated", False), tokens=frozenset(data.get("tokens", ())),
                refs=data["refs"], commits=data["commits"])  # fmt: skip


def repo_ids(root: Path) -> list[str]:
    return sorted(
        f"{manifest.parent.parent.name}/{manifest.parent.name}"
        for manifest in Path(root).glob("*/*/repo.json")
    )


def publish(
    root: Path,
    repo_id: str,
    files: dict[str, bytes | str | Path | int],
    *,
    branch: str = "main",
    private: bool | None = None,
    gated: str | bool | None = None,
    tokens: list[str] | None = None,
) -> str:
    """A new commit on `branch` holding exactly `files`; returns its hash. Access settings
    not given keep their current values."""
    folder = repo_folder(root, repo_id)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    manifest = folder / "repo.json"
    data = json.loads(manifest.read_text()) if manifest.exists() else {"refs": {}, "commits": {}}
    _apply_access(data, private=private, gated=gated, tokens=tokens)
    entries = {_clean(path): _store_blob(folder / "blobs", path, content)
               for path, content in files.items()}  # fmt: skip
    parent = data["refs"].get(branch)
    identity = json.dumps({"parent": parent, "files": entries}, sort_keys=True).encode()
    commit = hashlib.sha1(identity, usedforsecurity=False).hexdigest()  # git's hash length
    data["commits"][commit] = {
        "parent": parent,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "files": entries,
    }
    data["refs"][branch] = commit
    _write(manifest, data)
    return commit


def set_access(root: Path, repo_id: str, *, gated=None, private=None, tokens=None) -> None:
    """Change who may download (a licence accepted, a token revoked) without a commit."""
    manifest = repo_folder(root, repo_id) / "repo.json"
    data = json.loads(manifest.read_text())
    _apply_access(data, private=private, gated=gated, tokens=tokens)
    _write(manifest, data)


def _apply_access(data: dict, *, private, gated, tokens) -> None:
    for key, value in (("private", private), ("gated", gated), ("tokens", tokens)):
        if value is not None:
            data[key] = list(value) if key == "tokens" else value


def _write(manifest: Path, data: dict) -> None:
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, manifest)  # a server reading it sees the old or the new, whole


def _clean(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"not a file path inside a repository: {path!r}")
    return "/".join(parts)


def _store_blob(blobs: Path, path: str, content: bytes | str | Path | int) -> dict:
    tmp = blobs / f".incoming-{os.getpid()}"
    if isinstance(content, int):
        with open(tmp, "wb") as out:
            out.truncate(content)  # sparse: no disk for the zeros
    elif isinstance(content, bytes):
        tmp.write_bytes(content)
    else:
        shutil.copyfile(content, tmp)
    size = tmp.stat().st_size
    sha256, git_oid = _hashes(tmp, size)
    lfs = path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_BYTES
    if lfs:
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n"
        pointer_blob = f"blob {len(pointer)}\0{pointer}".encode()
        git_oid = hashlib.sha1(pointer_blob, usedforsecurity=False).hexdigest()
    blob_name = sha256 if lfs else git_oid
    os.replace(tmp, blobs / blob_name)
    entry = {"size": size, "blob": blob_name, "git_oid": git_oid}
    if lfs:
        entry["sha256"] = sha256
    return entry


def _hashes(path: Path, size: int) -> tuple[str, str]:
    sha256 = hashlib.sha256()
    git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)  # git blob ids
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
    return sha256.hexdigest(), git.hexdigest()
