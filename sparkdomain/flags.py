"""Validation of what a recipe may pass to `vllm serve`. Pure Python, no Django.

A recipe's typed fields cover the flags the planner and the guard need; any other option
the recipe's vLLM accepts goes in `extra_args`, judged by the contract of every vLLM the
panel knows and by the rules of `sparkdomain/option_rules.py` (a short denylist: the
panel's own options, code and files from outside the image, memory outside the
utilization — docs/recipes.md, "Options a recipe may carry"). Nothing here can add mounts,
devices, privileges or host namespaces: those are container options, never vLLM flags, and
the engine builds the container from host settings alone. Every value is one argv element
(no shell ever parses it), and no value may start with "-" (but a negative number), so a
value can never smuggle in another flag. A value that names a model, a tokenizer
or a folder is a Hugging Face id or a path in a host's model directories
(`sparkdomain/model_refs.py`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sparkdomain import option_rules, options, spark
from sparkdomain.bounded import clip
from sparkdomain.model_refs import is_hub_id, model_ref_problem
from vllm_adapter import advice
from vllm_adapter import contract as vllm_contract

# A branch, tag or commit of a model repository (the Hub's own names: no "..", no spaces).
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$")
# `--served-model-name` takes one name or several (vLLM: nargs="+"; the server answers to
# each, its /v1/models lists the first): a recipe keeps them space-separated.
MAX_SERVED_NAMES = 8


def served_names(value: str) -> list[str]:
    """The names of a space-separated served-model-name field, in order."""
    return value.split()


def served_names_problem(value: str) -> str:
    """Why `value` is not a list of served names, or ""."""
    names = served_names(value)
    if len(names) > MAX_SERVED_NAMES:
        return f"At most {MAX_SERVED_NAMES} names."
    bad = [n for n in names if not SERVED_NAME.match(n)]
    if bad:
        return (f"{bad[0][:60]!r}: use letters, digits and . _ / : - (starting with a letter or "
                "digit); separate several names with spaces.")  # fmt: skip
    if len(set(names)) != len(names):
        return "A name is given twice."
    return ""


IMAGE = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
PARSER_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


def _kv_cache_dtypes() -> tuple[str, ...]:
    """Every KV-cache dtype of every vLLM SparkPanel knows (the host's own is checked when a
    recipe is saved and at each start)."""
    seen: dict[str, None] = {}
    for version in reversed(vllm_contract.available_versions()):
        seen.update(dict.fromkeys(vllm_contract.load(version).kv_cache_dtypes))
    return tuple(seen) or ("auto",)


KV_CACHE_DTYPES = _kv_cache_dtypes()


@dataclass(frozen=True)
class FlagSpec:
    """One option a recipe may carry in its extra arguments, as the newest vLLM records it
    (kind: "switch", "int", "number", "choice", "json", "model" — a Hub id or a model path —
    or "text")."""

    kind: str
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


def _spec(option) -> FlagSpec:
    rule = option_rules.classify(option)
    base = option_rules.type_base(option.type)
    help_ = (option.help or "").strip().split("\n", 1)[0][:200]
    if not option.takes_value:
        return FlagSpec("switch", help_)
    if rule.kind is option_rules.Kind.PATH:
        return FlagSpec("model", help_)
    if option.choices is not None:
        return FlagSpec("choice", help_, tuple(option.choices))
    if option_rules.is_json(option):
        return FlagSpec("json", help_)
    if base == "int":
        return FlagSpec("int", help_)
    if base in ("float", "human_readable_int", "human_readable_int_or_auto"):
        return FlagSpec("number", help_)
    return FlagSpec("text", help_)


def _extra_flags() -> dict[str, FlagSpec]:
    """Every spelling of every option the newest vLLM has that a recipe may carry beyond its
    typed fields (option_rules: PATH and DATA; FIELD options have their own fields)."""
    out: dict[str, FlagSpec] = {}
    for option in vllm_contract.load().options:
        rule = option_rules.classify(option)
        if not option.options or rule.kind not in (option_rules.Kind.PATH, option_rules.Kind.DATA):
            continue
        if any(s in TYPED_FLAGS for s in option.all_strings):
            continue
        spec = _spec(option)
        for string in option.options:
            out[string] = spec
    return out


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
    "--pipeline-parallel-size": "the pipeline parallel size field",
    "-pp": "the pipeline parallel size field",
    "--reasoning-parser": "the reasoning parser field",
    "--tool-call-parser": "the tool-call parser field",
    "--served-model-name": "the served model name field",
    "--revision": "the revision field",
    "--model": "the model field",
    "--host": "the panel (it picks the address)",
    "--port": "the panel (it picks the port from the host's range)",
    "--api-key": "the panel (each run gets its own key, through the environment)",
}


# Every option a recipe may carry in its extra arguments, by every spelling (the newest
# vLLM's; each start checks the host's own). Derived from the contract by the rules, never
# a hand-written list: tests/recipes/test_allowlist_contract.py.
EXTRA_FLAGS: dict[str, FlagSpec] = _extra_flags()


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
    """Check the options a recipe carries beyond its typed fields, by the rules of
    `sparkdomain/option_rules.py` as every vLLM SparkPanel knows reads them (any option
    vLLM accepts, except the denylist: the panel's own, code and files from outside the
    image, memory outside the utilization); returns them normalised (`--flag value`,
    underscores as dashes). A path-valued option's path must lie in `model_dirs` (none
    given: Hub ids only). Raises FlagError with every problem found, one per line."""
    model_dirs = tuple(model_dirs)
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise FlagError("extra arguments must be a list of strings")
    out: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()
    for read in options.read_options(tokens, model_dirs=model_dirs):
        typed = next(
            (TYPED_FLAGS[s] for o in read.options for s in o.all_strings if s in TYPED_FLAGS),
            None,
        )
        if typed is not None:
            problems.append(f"{read.spelled} is set by {typed}, not in extra arguments")
            continue
        if read.problem:
            gone = advice.REMOVED.get(read.spelled) if not read.options else None
            problems.append(f"{read.spelled}: {gone}" if gone else read.problem)
            continue
        key = read.dest + (read.tokens[0].partition("=")[0] if "." in read.tokens[0] else "")
        repeats = read.options[-1].action == "_AppendAction"
        if key in seen and not repeats:
            problems.append(f"{read.spelled} is given twice")
        seen.add(key)
        out += read.tokens
    if problems:
        # Bounded like every import's messages (sparkdomain/bounded.py): a pasted list of
        # thousands of bad tokens gets the first few, each cut short, and a count.
        shown = [clip(p, 300) for p in problems[:MAX_PROBLEMS_SHOWN]]
        if len(problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"… and {len(problems) - MAX_PROBLEMS_SHOWN:,} more problems")
        raise FlagError("\n".join(shown))
    return out


MAX_PROBLEMS_SHOWN = 10


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
