"""What a given vLLM version accepts: its `vllm serve` parser and registries, rebuilt from
the contract file that ``tools/vllm_contract.py`` read out of that very version.

Pure Python (standard library only): the panel, sparksim and the tests use it.

``Contract.parse(argv)`` parses a `vllm serve` vector the way vLLM's
``FlexibleArgumentParser`` does (underscores read as dashes, ``--model X`` moved to the
front, unique abbreviations when the version allows them, ``--no-``/``--disable-`` forms)
with a real ``argparse`` parser built from the recorded options, so a refusal is worded as
vLLM words it (``vllm: error: unrecognized arguments: --swap-space 0``, ``vllm serve: error:
argument --dtype: invalid choice: ...``). ``Contract.check(argv)`` adds what vLLM checks
when it builds its engine config (quantization method, KV-cache dtype, parser names, load
format) and returns every problem with advice.

A contract is evidence, not a guess: ``tests/vllm_adapter`` checks the panel's vectors with
vLLM's own parser where the version is installed, and this reconstruction against it.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_adapter import advice

__all__ = [
    "ArgvError",
    "Contract",
    "Option",
    "Problem",
    "available_versions",
    "latest_version",
    "load",
]

CONTRACTS_DIR = Path(__file__).resolve().parent / "contracts"
_FILE = re.compile(r"^vllm-(\d+(?:\.\d+)*(?:[.+-][\w.]+)?)\.json$")

# Actions that take no value on the command line.
_SWITCH_ACTIONS = {
    "_StoreTrueAction",
    "_StoreFalseAction",
    "_StoreConstAction",
    "BooleanOptionalAction",
    "EnableDisableAction",
    "_CountAction",
    "_AppendConstAction",
    "_VersionAction",
}


def version_key(version: str) -> tuple:
    parts = re.split(r"[.+-]", version)
    return tuple((0, int(p)) if p.isdigit() else (-1, p) for p in parts)


def available_versions() -> list[str]:
    """The vLLM versions the panel has a contract for, oldest first."""
    found = [m.group(1) for p in CONTRACTS_DIR.glob("vllm-*.json") if (m := _FILE.match(p.name))]
    return sorted(found, key=version_key)


def latest_version() -> str:
    versions = available_versions()
    if not versions:
        raise FileNotFoundError(f"no vLLM contract in {CONTRACTS_DIR}")
    return versions[-1]


@functools.cache
def load(version: str | None = None) -> Contract:
    """The contract of one vLLM version (the newest when None). KeyError if unknown."""
    version = version or latest_version()
    path = CONTRACTS_DIR / f"vllm-{version}.json"
    if not _FILE.match(path.name) or not path.is_file():
        known = ", ".join(available_versions()) or "none"
        raise KeyError(f"no contract for vLLM {version} (known: {known})")
    return Contract(json.loads(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Option:
    options: tuple[str, ...]
    hidden: tuple[str, ...]
    dest: str
    action: str
    nargs: Any
    type: str | None
    choices: tuple[str, ...] | None
    default: Any
    const: Any
    group: str
    help: str
    deprecated: bool

    @property
    def takes_value(self) -> bool:
        return self.action not in _SWITCH_ACTIONS and self.nargs != 0

    @property
    def name(self) -> str:
        """The long spelling (`--max-model-len`), or the dest for a positional."""
        longs = [o for o in self.options if o.startswith("--")]
        return longs[0] if longs else (self.options[0] if self.options else self.dest)

    @property
    def all_strings(self) -> tuple[str, ...]:
        return self.options + self.hidden

    def value_problem(self, text: str) -> str | None:
        """Why vLLM's parser would refuse `text` as one value of this option (its recorded
        type — numbers, vLLM's human-readable integers — and its choices), in argparse's
        words; None when it takes it. Types the contract cannot rebuild (JSON, dataclasses,
        validated strings) pass here: their callers judge them."""
        converter = _converter(self.type)
        value: Any = text
        if converter is not None:
            try:
                value = converter(text)
            except (TypeError, ValueError, ArithmeticError):
                name = getattr(converter, "__name__", self.type)
                return f"argument {self.name}: invalid {name} value: {text!r}"
        if self.choices is not None and str(value) not in self.choices and text not in self.choices:
            shown = ", ".join(repr(c) for c in self.choices)
            return f"argument {self.name}: invalid choice: {text!r} (choose from {shown})"
        return None

    def negative(self, string: str) -> bool:
        """Whether this spelling of a switch turns it off (`--no-x`, `--disable-x`)."""
        if self.action == "_StoreFalseAction":
            return True
        if self.action not in {"BooleanOptionalAction", "EnableDisableAction"}:
            return False
        if string.startswith("--no-"):
            return not string.startswith("--no-disable-")
        return string.startswith("--disable-")


@dataclass(frozen=True)
class Problem:
    """One thing vLLM would refuse: its own words, and what to do about it."""

    flag: str
    message: str
    advice: str = ""

    def __str__(self) -> str:
        return f"{self.message} — {self.advice}" if self.advice else self.message


class ArgvError(ValueError):
    """vLLM's parser refused the vector. ``line`` is what vLLM prints on stderr."""

    def __init__(self, prog: str, message: str, usage: str = ""):
        super().__init__(message)
        self.prog = prog
        self.message = message
        self.usage = usage

    @property
    def line(self) -> str:
        return f"{self.prog}: error: {self.message}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise ArgvError(self.prog, message, self.format_usage().strip())


class _Switch(argparse.Action):
    """A BooleanOptionalAction / EnableDisableAction with the recorded spellings."""

    def __init__(self, option_strings, dest, contract_option: Option, **kwargs):
        self.contract_option = contract_option
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not self.contract_option.negative(option_string or ""))


_SUFFIXES = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "t": 1_000_000_000_000}
_BIN_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _human_int(text: str) -> int:
    """vLLM's human_readable_int: 1k = 1,000, 1K = 1,024, 25.6k = 25,600."""
    value = text.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)", value)
    if not match:
        return int(value)
    number, suffix = match.groups()
    if not suffix:
        return int(number)
    mult = _SUFFIXES[suffix] if suffix.islower() else _BIN_SUFFIXES[suffix]
    if "." in number:
        if suffix.isupper():
            raise ValueError("decimals need a decimal multiplier")
        return int(float(number) * mult)
    return int(number) * mult


def _human_int_or_auto(text: str) -> int:
    if text.strip().lower() in {"auto", "-1"}:
        return -1
    return _human_int(text)


def _optional_str(text: str) -> str | None:
    return None if text == "None" else text


def _converter(type_name: str | None):
    """A callable that converts and fails like the recorded type (argparse names the type in
    its message by ``__name__``, so the converter carries the recorded name)."""
    if type_name in (None, "str"):
        return None
    base = type_name.rsplit(".", 1)[-1]
    table = {
        "int": int,
        "float": float,
        "human_readable_int": _human_int,
        "human_readable_int_or_auto": _human_int_or_auto,
        "_optional_type": _optional_str,
    }
    fn = table.get(base)
    if fn is None:
        return None  # JSON/dataclass/validated strings: any string passes the parser
    if fn in (int, float):
        return fn

    def convert(text: str):
        return fn(text)

    convert.__name__ = base
    return convert


class Contract:
    """One vLLM version's contract (see the module docstring)."""

    def __init__(self, data: dict):
        self.data = data
        self.version: str = data["vllm_version"]
        self.allow_abbrev: bool = bool(data.get("parser", {}).get("allow_abbrev", True))
        self.options: tuple[Option, ...] = tuple(
            Option(
                options=tuple(o["options"]),
                hidden=tuple(o.get("hidden_options") or ()),
                dest=o["dest"],
                action=o["action"],
                nargs=o["nargs"],
                type=o["type"],
                choices=tuple(o["choices"]) if o.get("choices") is not None else None,
                default=o.get("default"),
                const=o.get("const"),
                group=o.get("group", ""),
                help=o.get("help", ""),
                deprecated=bool(o.get("deprecated")),
            )
            for o in data["options"]
        )
        self._by_string: dict[str, Option] = {s: o for o in self.options for s in o.all_strings}
        self.quantization_methods: tuple[str, ...] = tuple(data.get("quantization_methods", ()))
        self.reasoning_parsers: tuple[str, ...] = tuple(data.get("reasoning_parsers", ()))
        self.tool_parsers: tuple[str, ...] = tuple(data.get("tool_parsers", ()))
        self.kv_cache_dtypes: tuple[str, ...] = tuple(data.get("kv_cache_dtypes", ()))
        self.load_formats: tuple[str, ...] = tuple(data.get("load_formats", ()))
        self.metrics: dict[str, dict] = {m["name"]: m for m in data.get("metrics", ())}
        self.log_formats: dict[str, list[dict]] = dict(data.get("log_formats", {}))

    def __repr__(self) -> str:
        return f"<vLLM {self.version} contract: {len(self.options)} options>"

    # --- options ----------------------------------------------------------------------

    @staticmethod
    def normalise(flag: str) -> str:
        """vLLM reads `--max_model_len` as `--max-model-len` (up to the first '.')."""
        if not flag.startswith("--"):
            return flag
        head, dot, tail = flag[2:].partition(".")
        return "--" + head.replace("_", "-") + dot + tail

    def option(self, flag: str) -> Option | None:
        """The option a spelling names exactly (after vLLM's underscore rule)."""
        return self._by_string.get(self.normalise(flag.partition("=")[0]))

    def resolve(self, flag: str) -> tuple[Option | None, str]:
        """(option, how): how is "exact", "abbreviation", "ambiguous" or "unknown"."""
        name = self.normalise(flag.partition("=")[0])
        found = self._by_string.get(name)
        if found is not None:
            return found, "exact"
        if self.allow_abbrev and name.startswith("--") and len(name) > 2:
            matches = {o for s, o in self._by_string.items() if s.startswith(name)}
            if len(matches) == 1:
                return matches.pop(), "abbreviation"
            if len(matches) > 1:
                return None, "ambiguous"
        return None, "unknown"

    def dest_of(self, flag: str) -> str | None:
        option, how = self.resolve(flag)
        return option.dest if option is not None and how in ("exact", "abbreviation") else None

    def has(self, flag: str) -> bool:
        return self.option(flag) is not None

    # --- parsing ----------------------------------------------------------------------

    @functools.cached_property
    def _parser(self) -> _Parser:
        top = _Parser(prog="vllm", add_help=False)
        subparsers = top.add_subparsers(dest="subparser", parser_class=_Parser)
        serve = subparsers.add_parser(
            "serve",
            prog="vllm serve",
            usage="vllm serve [model_tag] [options]",
            allow_abbrev=self.allow_abbrev,
            add_help=False,
        )
        for option in self.options:
            kwargs: dict[str, Any] = {"dest": option.dest, "default": None}
            if not option.options:  # the positional model_tag
                serve.add_argument(option.dest, nargs=option.nargs, default=None)
                continue
            strings = list(option.all_strings)
            if option.action in {"BooleanOptionalAction", "EnableDisableAction"}:
                serve.add_argument(*strings, action=_Switch, contract_option=option, **kwargs)
                continue
            if option.action == "_StoreTrueAction":
                serve.add_argument(*strings, action="store_true", **kwargs)
                continue
            if option.action == "_StoreFalseAction":
                serve.add_argument(*strings, action="store_false", **kwargs)
                continue
            if option.action == "_StoreConstAction":
                serve.add_argument(*strings, action="store_const", const=option.const, **kwargs)
                continue
            if option.action == "_CountAction":
                serve.add_argument(*strings, action="count", **kwargs)
                continue
            if option.action in {"_VersionAction", "_HelpAction"}:
                continue
            if option.action == "_AppendAction":
                kwargs["action"] = "append"
            if option.nargs is not None:
                kwargs["nargs"] = option.nargs
            if option.choices is not None:
                kwargs["choices"] = list(option.choices)
            converter = _converter(option.type)
            if converter is not None:
                kwargs["type"] = converter
            serve.add_argument(*strings, **kwargs)
        # vLLM keeps its compatibility spellings registered but out of messages and help.
        for action in serve._actions:
            recorded = (
                self._by_string.get(action.option_strings[0]) if action.option_strings else None
            )
            if recorded is not None:
                action.option_strings = list(recorded.options)
        return top

    def _preprocess(self, args: list[str]) -> list[str]:
        """FlexibleArgumentParser's rewriting, before argparse sees the vector."""
        if args[:1] == ["serve"]:
            for i, arg in enumerate(args):
                if re.match(r"^--model(=.+|$)", arg):
                    if arg == "--model" and i + 1 < len(args):
                        args = ["serve", args[i + 1], *args[1:i], *args[i + 2 :]]
                    else:
                        args = ["serve", arg.removeprefix("--model="), *args[1:i], *args[i + 1 :]]
                    break
        out: list[str] = []
        skip = False
        for i, arg in enumerate(args):
            if skip:
                skip = False
                continue
            if arg.startswith("--"):
                key, eq, value = arg.partition("=")
                key = self.normalise(key)
                if "." in key and self._by_string.get(key.partition(".")[0]):
                    # `--compilation-config.mode 3`: vLLM merges it into the JSON option.
                    out += [key.partition(".")[0], "{}"]
                    skip = not eq and i + 1 < len(args)
                    continue
                out.append(f"{key}={value}" if eq else key)
            elif arg.startswith("-O") and arg != "-O":
                out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
            elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
                out.append("--optimization-level")
            else:
                out.append(arg)
        return out

    def parse(self, argv: Sequence[str]) -> dict[str, Any]:
        """The values vLLM's parser would take from `vllm serve ...` (only those given,
        keyed by dest). Raises ArgvError exactly where vLLM's parser refuses."""
        args = list(argv)
        if args[:1] == ["vllm"]:
            args = args[1:]
        if args[:1] != ["serve"]:
            raise ArgvError("vllm", "expected the serve subcommand")
        namespace = self._parser.parse_args(self._preprocess(args))
        values = {k: v for k, v in vars(namespace).items() if v is not None and k != "subparser"}
        return values

    def check(self, argv: Sequence[str]) -> list[Problem]:
        """Every problem vLLM would raise for this vector, at parse time and when it builds
        its config from the values; [] when vLLM would accept it."""
        problems: list[Problem] = []
        try:
            values = self.parse(argv)
        except ArgvError as exc:
            flag = _flag_in(exc.message)
            unknown = "unrecognized arguments" in exc.message
            hint = (
                advice.for_flag(flag, self.version)
                if unknown
                else advice.for_value(flag, "", self.version)
            )
            problems.append(Problem(flag, exc.line, hint))
            # Report every unknown flag at once, not one per save.
            if unknown:
                for other in _unknown_flags(self, argv):
                    if other != flag:
                        problems.append(
                            Problem(
                                other,
                                f"vllm: error: unrecognized arguments: {other}",
                                advice.for_flag(other, self.version),
                            )
                        )
            return problems
        problems += self._check_values(values)
        return problems

    def _check_values(self, values: dict[str, Any]) -> list[Problem]:
        problems = []
        registries = (
            ("quantization", "--quantization", self.quantization_methods, _quant_message),
            ("kv_cache_dtype", "--kv-cache-dtype", self.kv_cache_dtypes, _choice_message),
            ("reasoning_parser", "--reasoning-parser", self.reasoning_parsers, _choice_message),
            ("tool_call_parser", "--tool-call-parser", self.tool_parsers, _choice_message),
            ("load_format", "--load-format", self.load_formats, _choice_message),
        )
        for dest, flag, known, message in registries:
            value = values.get(dest)
            if value in (None, "") or not known:
                continue
            if dest == "reasoning_parser" and value == "none":
                continue
            if str(value) not in known:
                problems.append(
                    Problem(
                        flag,
                        message(flag, str(value), known),
                        advice.for_value(flag, str(value), self.version),
                    )
                )
        return problems


def _quant_message(flag: str, value: str, known: Sequence[str]) -> str:
    # vllm/config/model.py's own words.
    return f"Unknown quantization method: {value}. Must be one of {list(known)}."


def _choice_message(flag: str, value: str, known: Sequence[str]) -> str:
    shown = ", ".join(repr(k) for k in known)
    return f"{flag}: {value!r} is not one of this vLLM's values ({shown})"


def _flag_in(message: str) -> str:
    match = re.search(r"(--?[A-Za-z0-9][\w.-]*)", message)
    return match.group(1) if match else ""


def _unknown_flags(contract: Contract, argv: Sequence[str]) -> list[str]:
    out = []
    for arg in argv[3:]:
        if arg.startswith("--"):
            option, _ = contract.resolve(arg)
            if option is None:
                out.append(contract.normalise(arg.partition("=")[0]))
    return out
