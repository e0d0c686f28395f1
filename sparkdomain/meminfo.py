"""Reading host memory the way a Spark needs it: /proc/meminfo, not nvidia-smi (which
shows no memory numbers on GB10). Pure Python."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class MeminfoError(ValueError):
    """The file is missing or not in /proc/meminfo format; the message says which."""


@dataclass(frozen=True)
class Memory:
    total_bytes: int
    available_bytes: int


def parse_meminfo(text: str) -> Memory:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            raise MeminfoError(f"malformed meminfo line: {line!r}") from None
        unit = parts[1] if len(parts) > 1 else ""
        values[key.strip()] = number * 1024 if unit == "kB" else number
    try:
        return Memory(values["MemTotal"], values["MemAvailable"])
    except KeyError as exc:
        raise MeminfoError(f"meminfo has no {exc.args[0]} line") from None


def read_meminfo(path: str | Path) -> Memory:
    try:
        return parse_meminfo(Path(path).read_text())
    except OSError as exc:
        raise MeminfoError(f"cannot read {path}: {exc.strerror or exc}") from None
