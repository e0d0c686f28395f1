"""The one door to git: a bare mirror of a recipe registry (a git URL, or a local checkout)
and reads of its files at a commit. Standard library only; `git` runs as an argument list,
never through a shell, with no prompts, no hooks, no submodules, no system or user config,
only the transports a registry needs (https, ssh, file and local paths; never `ext::`), a
time limit on every command and a size limit on every file read.

Nothing is ever checked out: files are read with `git show <commit>:<path>`, so a recipe
repository cannot place symbolic links or hooks on the panel's disk."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GitError", "Mirror", "url_problem"]

TIMEOUT_S = 120
MAX_FILE_BYTES = 1_000_000
MAX_FILES = 5_000
_SCP = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[A-Za-z0-9._/~-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_PATH = re.compile(r"^[A-Za-z0-9._@+-][A-Za-z0-9._@+ /-]{0,400}$")


class GitError(RuntimeError):
    """git refused or failed; the message is one sentence for the page."""


def url_problem(url: str) -> str | None:
    """Why a registry source is not one the panel fetches (None: it is)."""
    if not isinstance(url, str) or not url.strip() or len(url) > 500:
        return "Give a git URL (https://…, ssh://…, git@host:path, file://…) or a local path."
    url = url.strip()
    if any(c in url for c in "\x00\n\r\t ") or url.startswith("-"):
        return "A registry URL has no spaces or control characters and does not start with '-'."
    if url.startswith(("https://", "ssh://", "file://")) or _SCP.match(url):
        return None
    if url.startswith("/"):
        return None if ".." not in url.split("/") else "A local path may not contain '..'."
    return (
        "Only https://, ssh://, git@host:path, file:// URLs and absolute local paths are "
        "registries (no other transport runs: ext:: would run a command)."
    )


def _env() -> dict[str, str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG", "SSL_CERT_FILE", "SSL_CERT_DIR", "SSH_AUTH_SOCK")
    }
    return {
        **keep,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": "/bin/false",
        "GIT_SSH_COMMAND": "ssh -oBatchMode=yes -oStrictHostKeyChecking=accept-new",
    }


_SAFE = (
    "-c",
    "protocol.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "protocol.https.allow=always",
    "-c",
    "protocol.ssh.allow=always",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "submodule.recurse=false",
)


def _git(args: list[str], *, cwd: Path | None = None, timeout: float = TIMEOUT_S) -> bytes:
    try:
        done = subprocess.run(
            ["git", *_SAFE, *args],
            cwd=cwd,
            env=_env(),
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {timeout:.0f} s") from None
    except FileNotFoundError:
        raise GitError("git is not installed on the panel's machine") from None
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        said = next((line for line in reversed(lines) if line.startswith("fatal:")), "")
        raise GitError(
            f"git {args[0]} failed: {said or (lines[-1] if lines else 'no output')}"[:300]
        )
    return done.stdout


@dataclass(frozen=True)
class Mirror:
    """A bare mirror of one registry under `path` (the panel's var directory)."""

    path: Path

    def fetch(self, url: str) -> str:
        """Clone or update the mirror from `url`; returns the commit its default branch is at."""
        problem = url_problem(url)
        if problem:
            raise GitError(problem)
        if not (self.path / "HEAD").exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _git(["clone", "--bare", "--no-recurse-submodules", "--", url, str(self.path)])
        else:
            _git(
                [
                    "fetch",
                    "--prune",
                    "--no-recurse-submodules",
                    "--",
                    url,
                    "+HEAD:refs/heads/_sparkpanel_head",
                ],
                cwd=self.path,
            )
            _git(["symbolic-ref", "HEAD", "refs/heads/_sparkpanel_head"], cwd=self.path)
        return self.head()

    def head(self) -> str:
        return _git(["rev-parse", "--verify", "HEAD^{commit}"], cwd=self.path).decode().strip()

    def files(self, commit: str, under: str = "") -> list[str]:
        """The paths of the files at `commit` (under a folder), at most MAX_FILES."""
        self._check(commit, under or "x")
        args = ["ls-tree", "-r", "-z", "--name-only", commit]
        if under:
            args += ["--", under.rstrip("/") + "/"]
        names = _git(args, cwd=self.path).decode("utf-8", "replace").split("\x00")
        return [n for n in names if n][:MAX_FILES]

    def blob(self, commit: str, path: str) -> str:
        """The id of the file's content at `commit` (changes exactly when the file does)."""
        self._check(commit, path)
        return _git(["rev-parse", "--verify", f"{commit}:{path}"], cwd=self.path).decode().strip()

    def read(self, commit: str, path: str) -> str:
        """The file's text at `commit`, at most MAX_FILE_BYTES."""
        self._check(commit, path)
        size = int(_git(["cat-file", "-s", f"{commit}:{path}"], cwd=self.path).decode().strip())
        if size > MAX_FILE_BYTES:
            raise GitError(f"{path} is {size:,} bytes; a recipe is at most {MAX_FILE_BYTES:,}")
        return _git(["show", f"{commit}:{path}"], cwd=self.path).decode("utf-8", "replace")

    def read_bytes(self, commit: str, path: str, limit: int) -> bytes:
        """The file's bytes at `commit`, refused over `limit` bytes."""
        self._check(commit, path)
        size = int(_git(["cat-file", "-s", f"{commit}:{path}"], cwd=self.path).decode().strip())
        if size > limit:
            raise GitError(f"{path} is {size:,} bytes; at most {limit:,}")
        return _git(["cat-file", "blob", f"{commit}:{path}"], cwd=self.path)

    @staticmethod
    def _check(commit: str, path: str) -> None:
        if not _COMMIT.match(commit or ""):
            raise GitError("not a commit id")
        if not _PATH.match(path) or ".." in path.split("/") or path.startswith("/"):
            raise GitError(f"not a path in the registry: {path[:80]!r}")
