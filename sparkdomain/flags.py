"""Validation of what a recipe may pass to `vllm serve`. Pure Python, no Django.

A recipe's typed fields cover the flags that matter for memory; anything else goes in
`extra_args`, which only accepts flags from the allowlist below with checked values.
Nothing here can add mounts, devices, privileges or host namespaces: those are container
options, never vLLM flags, and the engine builds the container from host settings alone.
Every value is one argv element (no shell ever parses it), and no value may start with
"-", so a value can never smuggle in another flag. A value that names a model, a tokenizer
or a folder is a Hugging Face id or a path in a host's model directories
(`sparkdomain/model_refs.py`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sparkdomain import spark
from sparkdomain.bounded import clip
from sparkdomain.model_refs import is_hub_id, model_ref_problem
from vllm_adapter import advice

# A branch, tag or commit of a model repository (the Hub's own names: no "..", no spaces).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")
IMAGE = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
PARSER_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class FlagSpec:
    kind: str  # "switch", "int", "choice", "token", "model" (a Hub id or a model path)
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


EXTRA_FLAGS: dict[str, FlagSpec] = {
    "--trust-remote-code": FlagSpec("switch", "run the model repository's own Python code"),
    "--enable-auto-tool-choice": FlagSpec("switch", "let the model decide to call tools"),
    "--enable-chunked-prefill": FlagSpec("switch", "split long prefills into chunks"),
    "--no-enable-chunked-prefill": FlagSpec("switch", "never split prefills"),
    "--async-scheduling": FlagSpec("switch", "overlap scheduling with execution"),
    "--enable-expert-parallel": FlagSpec("switch", "expert parallelism for MoE layers"),
    "--disable-log-stats": FlagSpec("switch", "no periodic stats in the log"),
    "--enable-log-requests": FlagSpec("switch", "log every request"),
    "--load-format": FlagSpec(
        "choice",
        "weight loader (fastsafetensors can shorten a 10-15 min first load)",
        choices=("auto", "safetensors", "fastsafetensors", "runai_streamer", "pt"),
    ),
    "--dtype": FlagSpec(
        "choice", "compute dtype", choices=("auto", "bfloat16", "float16", "half", "float")
    ),
    "--block-size": FlagSpec(
        "choice", "KV cache block size in tokens", choices=("8", "16", "32", "64", "128")
    ),
    "--mamba-ssm-cache-dtype": FlagSpec(
        "choice", "Mamba state dtype", choices=("auto", "float32", "bfloat16", "float16")
    ),
    "--generation-config": FlagSpec(
        "choice", "where default sampling parameters come from", choices=("auto", "vllm")
    ),
    "--tokenizer-mode": FlagSpec(
        "choice", "tokenizer implementation", choices=("auto", "slow", "mistral", "custom")
    ),
    "--seed": FlagSpec("int", "random seed", minimum=0, maximum=2**31 - 1),
    "--long-prefill-token-threshold": FlagSpec(
        "int", "a prefill longer than this is 'long'", minimum=1, maximum=1_048_576
    ),
    "--max-logprobs": FlagSpec(
        "int", "most logprobs a request may ask for", minimum=0, maximum=10_000
    ),
    # Its folder's Python runs with --trust-remote-code: a Hub id or a model directory's path.
    "--tokenizer": FlagSpec("model", "tokenizer repository id (or a path in a model directory)"),
}

# Flags a recipe sets through its typed fields (or that the panel itself controls).
TYPED_FLAGS: dict[str, str] = {
    "--gpu-memory-utilization": "the GPU memory utilization field",
    "--max-model-len": "the max model length field",
    "--max-num-seqs": "the max concurrent sequences field",
    "--kv-cache-dtype": "the KV cache dtype field",
    "--quantization": "the quantization field",
    "-q": "the quantization field",
    "--enable-prefix-caching": "the prefix caching checkbox",
    "--no-enable-prefix-caching": "the prefix caching checkbox",
    "--enforce-eager": "the enforce eager checkbox",
    "--max-num-batched-tokens": "the max batched tokens field",
    "--tensor-parallel-size": "the tensor parallel size field",
    "-tp": "the tensor parallel size field",
    "--reasoning-parser": "the reasoning parser field",
    "--tool-call-parser": "the tool-call parser field",
    "--served-model-name": "the served model name field",
    "--revision": "the revision field",
    "--model": "the model field",
    "--host": "the panel (it picks the address)",
    "--port": "the panel (it picks the port from the host's range)",
    "--api-key": "the panel (each run gets its own key, through the environment)",
}


class FlagError(ValueError):
    """A user-facing message about one extra argument."""


def parse_extra_args(text: str, model_dirs: Iterable[str] = ()) -> list[str]:
    """Split the extra-arguments box (one or more flags per line) into argv tokens and
    validate them. Raises FlagError with every problem found, one per line."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise FlagError(f"could not read the extra arguments: {exc}") from None
    return validate_extra_args(tokens, model_dirs)


def validate_extra_args(tokens: list[str], model_dirs: Iterable[str] = ()) -> list[str]:
    """Check argv tokens against the allowlist; returns them normalised (--flag value).
    A path-valued flag's path must lie in `model_dirs` (none given: Hub ids only)."""
    model_dirs = tuple(model_dirs)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise FlagError("extra arguments must be a list of strings")
    out: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        flag, eq, inline = token.partition("=")
        if not flag.startswith("-"):
            problems.append(f"{token!r} is not a flag (flags start with --)")
            continue
        if flag in TYPED_FLAGS:
            problems.append(f"{flag} is set by {TYPED_FLAGS[flag]}, not in extra arguments")
            if not eq and i < len(tokens) and not tokens[i].startswith("-"):
                i += 1
            continue
        spec = EXTRA_FLAGS.get(flag)
        if spec is None:
            gone = advice.REMOVED.get(flag)
            problems.append(
                f"{flag}: {gone}"
                if gone
                else f"{flag} is not an allowed extra argument (allowed: "
                + ", ".join(sorted(EXTRA_FLAGS))
                + ")"
            )
            if not eq and i < len(tokens) and not tokens[i].startswith("-"):
                i += 1
            continue
        if flag in seen:
            problems.append(f"{flag} is given twice")
        seen.add(flag)
        if spec.kind == "switch":
            if eq:
                problems.append(f"{flag} takes no value")
            out.append(flag)
            continue
        if eq:
            value = inline
        elif i < len(tokens):
            value = tokens[i]
            i += 1
        else:
            problems.append(f"{flag} needs a value")
            continue
        error = _check_value(flag, spec, value, model_dirs)
        if error:
            problems.append(error)
        else:
            out += [flag, value]
    if problems:
        # Bounded like every import's messages (sparkdomain/bounded.py): a pasted list of
        # thousands of bad tokens gets the first few, each cut short, and a count.
        shown = [clip(p, 300) for p in problems[:MAX_PROBLEMS_SHOWN]]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"… and {len(problems) - MAX_PROBLEMS_SHOWN:,} more problems")
        raise FlagError("\n".join(shown))
    return out


MAX_PROBLEMS_SHOWN = 10


def _check_value(
    flag: str, spec: FlagSpec, value: str, model_dirs: tuple[str, ...] = ()
) -> str | None:
    if value.startswith("-"):
        return f"{flag}: the value {value!r} may not start with '-'"
    if spec.kind == "choice" and value not in spec.choices:
        return f"{flag}: {value!r} is not one of {', '.join(spec.choices)}"
    if spec.kind == "int":
        try:
            number = int(value)
        except ValueError:
            return f"{flag}: {value!r} is not a whole number"
        if spec.minimum is not None and number < spec.minimum:
            return f"{flag}: {number} is below the minimum {spec.minimum}"
        if spec.maximum is not None and number > spec.maximum:
            return f"{flag}: {number} is above the maximum {spec.maximum}"
    if spec.kind == "token" and not TOKEN.match(value):
        return f"{flag}: {value!r} may only contain letters, digits, '.', '_', '/' and '-'"
    if spec.kind == "model":
        return model_ref_problem(value, field=flag, model_dirs=model_dirs)
    return None


def format_extra_args(tokens: list[str]) -> str:
    """The inverse of parse_extra_args, for the edit box (one flag per line)."""
    lines: list[str] = []
    for token in tokens:
        if token.startswith("-") or not lines:
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return "\n".join(lines)


def validate_model_id(value: str, model_dirs: Iterable[str] = ()) -> str | None:
    """None for a Hub id or a path in one of `model_dirs` (none given: Hub ids only)."""
    return model_ref_problem(value, field="model", model_dirs=tuple(model_dirs))


def is_hub_model(model_id: str) -> bool:
    """A Hugging Face id (the panel downloads it), not a path inside the server."""
    return is_hub_id(model_id)


def validate_revision(value: str) -> str | None:
    if not value or (REVISION.match(value) and ".." not in value.split("/")):
        return None
    return (
        "Use a branch, tag or commit of the model's repository (e.g. main, v1.0, or a "
        "40-character commit hash); blank follows the default branch."
    )


def validate_image(value: str) -> str | None:
    if IMAGE.match(value):
        return None
    return (
        "Use a container image reference such as vllm/vllm-openai:cu130-nightly "
        "(registry/name:tag or name@sha256:digest)."
    )


def check_utilization(value: object) -> Decimal:
    """The ≤ 0.90 rule as one function: every path a value can take calls this."""
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise FlagError(f"{value!r} is not a number. {spark.UTILIZATION_RULE}") from None
    if not number.is_finite() or number <= 0 or number > spark.MAX_GPU_MEMORY_UTILIZATION:
        raise FlagError(f"{number} is not allowed. {spark.UTILIZATION_RULE}")
    return number
