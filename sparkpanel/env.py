"""Small typed helpers for reading settings from the environment.

Values come from the process environment first, then from a `.env` file in the project
root (which never overrides the real environment). Nothing here imports Django.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ImproperlyConfiguredEnv(ValueError):
    """A variable is set to something that cannot be parsed; the message names it."""


def load_dotenv(path: Path) -> None:
    """Read KEY=VALUE lines from `path` into os.environ without overriding set values."""
    if not path.is_file():
        return
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :]
        key, sep, value = line.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ImproperlyConfiguredEnv(f"{path}:{lineno}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        os.environ.setdefault(key.strip(), value)


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not a boolean (use true or false)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not an integer") from None


def env_secret(name: str) -> str:
    """A secret from NAME, or from the file NAME_FILE names (Docker/compose secrets)."""
    value = os.environ.get(name, "")
    path = os.environ.get(f"{name}_FILE", "")
    if not value and path:
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfiguredEnv(f"{name}_FILE={path!r} cannot be read: {exc}") from None
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def secret_key(var_dir: Path) -> str:
    """SECRET_KEY from the environment, else from var/secret_key, created on first use.

    The generated file is private to the user (0600) and var/ is never committed.
    """
    from_env = os.environ.get("SECRET_KEY", "").strip()
    if from_env:
        return from_env
    path = var_dir / "secret_key"
    if path.is_file():
        stored = path.read_text(encoding="utf-8").strip()
        if stored:
            return stored
    var_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(key + "\n")
    return key
