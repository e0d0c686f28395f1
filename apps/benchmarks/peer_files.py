"""What an imported peer's file becomes before it is stored (apps/benchmarks/imports.py):
one `ImportedLevel` a run, in the shape of the panel's own levels, read by
vllm_bench.py (`vllm bench serve` files) and guidellm_format.py (GuideLLM reports) with the
same bounds and the same way of saying what is wrong (`FileProblem`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

MAX_FILE_BYTES = 8 * 1024 * 1024  # UPLOAD_BODY_MAX_BYTES; 500 requests × 1,000 tokens is ~5 MB
MAX_FILE_LEVELS = 32  # runs in a file (a job's levels: MAX_LEVELS)
MAX_FILE_REQUESTS = 100_000  # per run


class FileProblem(ValueError):
    """Why a file cannot be imported, said so a person can fix it."""


@dataclass(frozen=True)
class ImportedLevel:
    """One run of a peer's tool, as the panel stores a level: its traffic, its headline
    numbers and its per-request rows (in `Result.requests`' shape)."""

    request_rate: float | None  # None: a closed loop
    max_concurrency: int | None
    burstiness: float | None
    prompt_tokens: int  # the median request's
    output_tokens: int
    duration: float
    rows: list[dict]
    model_id: str
    date: str
    backend: str
    label: str
    goodput: float | None


def number(value, where: str, *, minimum: float = 0.0) -> float:
    """A finite number of at least `minimum` (JSON's true/false are not numbers), else a
    FileProblem naming where it was."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FileProblem(f"{where}: {value!r} is not a number")
    if value < minimum:
        raise FileProblem(f"{where}: {value!r} is below {minimum:g}")
    return float(value)


def loads(text: str, name: str):
    """json.loads, with what it raises beyond JSONDecodeError (a file nested deeper than
    Python recurses, a number of more digits than int() takes) said as a FileProblem."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise FileProblem(f"{name} nests its JSON too deep") from None
    except ValueError as exc:
        raise FileProblem(f"{name} is not JSON the panel can read: {exc}"[:300]) from None


def read_documents(raw: bytes, name: str) -> list:
    """The JSON documents of an upload, read once: the whole file as one, or one a line
    (JSON lines, as `vllm bench serve --append-result` writes); bounded in bytes and lines."""
    if len(raw) > MAX_FILE_BYTES:
        raise FileProblem(f"{name} is {len(raw) / 2**20:.0f} MiB; at most "
                          f"{MAX_FILE_BYTES // 2**20} MiB")  # fmt: skip
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileProblem(f"{name} is not UTF-8 text (a JSON file is)") from None
    try:
        objects = [loads(text, name)]
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > MAX_FILE_LEVELS:
            raise FileProblem(f"{name} has {len(lines)} lines; at most {MAX_FILE_LEVELS} "
                              "levels a file") from None  # fmt: skip
        try:
            objects = [loads(line, name) for line in lines]
        except json.JSONDecodeError as exc:
            raise FileProblem(f"{name} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not objects:
        raise FileProblem(f"{name} is empty")
    return objects
