"""Reading the options of a `vllm serve` vector the way every vLLM SparkPanel knows reads
them, judged by the rules of `sparkdomain/option_rules.py`. Pure Python.

One reader serves two doors: the recipe's front door (`sparkdomain/flags.py::
validate_extra_args`: the options a recipe carries beyond its typed fields, every problem at
once) and the last line of defence (`sparkdomain/command.py::assert_safe_argv`: the first
problem refuses the whole vector). Both therefore agree on what an option is, which values
it takes and which spellings are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sparkdomain import option_rules
from vllm_adapter import contract as vllm_contract

_NEGATIVE_NUMBER = re.compile(r"-\d")


def contracts() -> list[vllm_contract.Contract]:
    """Every vLLM SparkPanel has a contract for, oldest first."""
    return [vllm_contract.load(v) for v in vllm_contract.available_versions()]


def is_option(arg: str) -> bool:
    return arg.startswith("-") and arg != "-" and not _NEGATIVE_NUMBER.match(arg)


def given(tokens: Sequence[str]) -> list[tuple[str, str]]:
    """(option, value) for each option in a vector, in order, as written (`--flag value` or
    `--flag=value`; "" for a switch). A quick look for callers that know the option they
    want; `read_options` is what judges a vector."""
    out = []
    for i, arg in enumerate(tokens):
        if not is_option(arg):
            continue
        flag, eq, inline = arg.partition("=")
        following = tokens[i + 1] if i + 1 < len(tokens) and not is_option(tokens[i + 1]) else ""
        out.append((flag, inline if eq else following))
    return out


@dataclass
class Read:
    """One option of a vector as read: its spelling (underscores as dashes), the option as
    each known vLLM records it, the argv tokens it took, and its rule (from the newest vLLM
    that has it). `problem` is why it may not reach vLLM as written (None: it may)."""

    spelled: str
    options: list = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    rule: option_rules.Rule | None = None
    problem: str | None = None

    @property
    def dest(self) -> str:
        return self.options[-1].dest if self.options else ""


def _named(spelled: str, known: Sequence) -> tuple[list, str | None]:
    """The option each known vLLM reads a spelling as, exactly (an abbreviation is refused:
    another vLLM may read it as another option), or why none."""
    found = []
    for contract in known:
        option, how = contract.resolve(spelled)
        if how == "abbreviation":
            return [], (
                f"{spelled} abbreviates {option.name}: spell it out (an abbreviation can "
                "mean another option in another vLLM)"
            )
        if how == "exact" and option.options:
            found.append(option)
    if not found:
        return [], (
            f"{spelled} is not an option of any vLLM SparkPanel knows "
            f"({', '.join(c.version for c in known)}): spell out a `vllm serve` option"
        )
    return found, None


def _values(option, flags: Sequence[str], at: int) -> tuple[list[str], int, str | None]:
    """The values argparse gives a value-taking option from flags[at:], where the next
    argument starts, and why it is short of values (inline `=` values are the caller's)."""
    nargs = option.nargs
    taken: list[str] = []
    limit = nargs if isinstance(nargs, int) else (1 if nargs in (None, "?") else len(flags))
    while at < len(flags) and len(taken) < limit and not is_option(flags[at]):
        taken.append(flags[at])
        at += 1
    if not taken and nargs not in ("?", "*", 0):
        return taken, at, f"{option.name} needs a value"
    if isinstance(nargs, int) and len(taken) < nargs:
        return taken, at, f"{option.name} needs {nargs} values"
    return taken, at, None


def read_options(
    flags: Sequence[str],
    *,
    model_dirs: Iterable[str] | None,
    known: Sequence | None = None,
    panel_sets: bool = False,
) -> list[Read]:
    """Every option of `flags` (the arguments after `vllm serve <model>`), each with the
    tokens it took and its problem. `panel_sets`: the options the panel adds to a run itself
    (`option_rules.PANEL_SETS`) pass, their values checked — the guard's reading; a recipe's
    reading refuses them. `model_dirs` as in `option_rules.value_problem`."""
    known = list(known) if known is not None else contracts()
    dirs = None if model_dirs is None else tuple(model_dirs)
    out: list[Read] = []
    i = 0
    while i < len(flags):
        arg = flags[i]
        i += 1
        if not is_option(arg):
            out.append(
                Read(
                    arg,
                    tokens=[arg],
                    problem=f"{arg!r} is a value without its option (one value per option; "
                    "the model comes right after 'serve'): vLLM would refuse it",
                )
            )
            continue
        spelled, eq, inline = arg.partition("=")
        if spelled.startswith("--"):
            spelled = vllm_contract.Contract.normalise(spelled)
        head, dot, keys = spelled.partition(".") if spelled.startswith("--") else (spelled, "", "")
        read = Read(head)
        out.append(read)
        read.options, read.problem = _named(head, known)
        if read.problem:
            read.tokens = [arg]
            # A value after an unknown option is its value, not a stray one.
            if not eq and i < len(flags) and not is_option(flags[i]):
                read.tokens.append(flags[i])
                i += 1
            continue
        read.rule = option_rules.classify(read.options[-1])
        for option in read.options:
            rule = option_rules.classify(option)
            if not rule.allowed and not (
                panel_sets
                and rule.kind is option_rules.Kind.PANEL
                and option.dest in option_rules.PANEL_SETS
            ):
                read.rule = rule
                read.problem = rule.refusal(head)
                break
        takes = {option.takes_value for option in read.options}
        if len(takes) > 1:
            read.problem = read.problem or f"{head} takes a value in one vLLM and none in another"
        if not read.options[0].takes_value:
            read.tokens = [spelled if not eq else arg]
            if (eq or dot) and not read.problem:
                read.problem = f"{head} takes no value"
            continue
        if dot:  # `--compilation-config.mode 3`: one key of a JSON option
            if not eq:
                if i >= len(flags) or is_option(flags[i]):
                    read.tokens = [spelled]
                    read.problem = read.problem or f"{spelled} needs a value"
                    continue
                inline, i = flags[i], i + 1
            read.tokens = [f"{spelled}={inline}"]
            if read.problem:
                continue
            if not all(option_rules.is_json(o) for o in read.options) or not keys:
                read.problem = f"{spelled}: only a JSON option takes keys"
                continue
            read.problem = option_rules.json_problem(head, option_rules.nested(keys, inline), dirs)
            continue
        short = None
        if eq:
            values = [inline]
        else:
            values, i, short = _values(read.options[0], flags, i)
            read.problem = read.problem or short
        read.tokens = [head, *values]
        denied = read.rule is not None and not read.rule.allowed
        if denied and not short and option_rules.value_allows(read.dest, values):
            read.problem = None  # a value that makes the option harmless (ALLOWED_VALUES)
            continue
        if read.problem:
            continue
        for value in values:
            problem = option_rules.value_problem(read.options, head, value, model_dirs=dirs)
            if problem:
                read.problem = problem
                break
    return out
