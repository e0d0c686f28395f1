"""Bounded readers for the documents people paste or upload: YAML (recipe imports, sparkrun
recipes) and JSON (a model's config.json).

A parser that bounds only what it reads is not enough: 351 bytes of nested YAML anchors
stand for 9**8 strings, and anything that walks them (a form, an error message) does that
work. So every document is refused, with the reason and where it is, when it has

- more bytes than `max_bytes`;
- values nested deeper than `max_depth`;
- more than `max_aliases` aliases (`*name`), an alias inside the node it names (a
  recursive structure), or more than `max_nodes` values once every alias and merge key
  is counted at its full size (what the document *stands for*, not what it spells);
- a text value longer than `max_scalar_chars`;
- a number with more than `max_number_chars` characters, a JSON float outside
  ±`max_float`, or NaN/Infinity.

`clip()` is for error messages: they name a value, never echo an unbounded one.

No Django. YAML is parsed by libyaml where PyYAML has it (the pure-Python scanner costs
seconds per MB). DocumentError is a ValueError, so forms and the API turn it into a
400/422 with the message as it is.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from dataclasses import dataclass
from itertools import accumulate

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent

SHOWN_CHARS = 120  # what an error message quotes of a value


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 1_000_000
    max_depth: int = 32
    max_aliases: int = 100
    max_nodes: int = 100_000
    max_scalar_chars: int = 65_536
    max_number_chars: int = 32
    max_float: float = 1e18


YAML_LIMITS = Limits()
# config.json files are small (a few kB); the upload form takes up to 2 MB.
JSON_LIMITS = Limits(max_bytes=2_000_000, max_depth=64, max_nodes=500_000)


class DocumentError(ValueError):
    """A document that cannot be read, or that stands for more than a recipe can be."""


# repr() of a big nested list is itself the unbounded work; reprlib stops early.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 8, 8, 6, 6
_REPR.maxlong, _REPR.maxstring, _REPR.maxother = 40, SHOWN_CHARS, SHOWN_CHARS


def clip(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as text for a message (repr-like when it is not text), cut to `limit`
    characters with the length that was left out."""
    try:
        text = value if isinstance(value, str) else _REPR.repr(value)
    except ValueError:  # an int beyond Python's 4,300 digits for str()
        text = f"<a {type(value).__name__} too long to show>"
    if len(text) <= limit:
        return text
    more = f" ({len(text):,} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}…{more}"


def _where(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _size_check(text: str | bytes, limits: Limits, what: str) -> str:
    if isinstance(text, bytes | bytearray):
        if len(text) > limits.max_bytes:
            raise DocumentError(f"{what} is larger than {limits.max_bytes:,} bytes.")
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DocumentError(
                f"{what} is not UTF-8 text (byte {exc.start} cannot be decoded)."
            ) from None
    # Characters ≤ bytes: the cheap test first, the exact one only near the limit.
    if len(text) > limits.max_bytes or (
        len(text) * 4 > limits.max_bytes and len(text.encode()) > limits.max_bytes
    ):
        raise DocumentError(f"{what} is larger than {limits.max_bytes:,} bytes.")
    return text


# --- YAML ------------------------------------------------------------------------------------


# libyaml's C parser when PyYAML has it (the pure-Python scanner costs seconds per MB).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _measure(text: str, limits: Limits) -> None:
    """Walk the document's events (no values are built) and refuse it at the first bound
    it passes: depth, aliases, what aliases stand for, text length. Stopping early also
    stops the scanner, whose look-ahead in deeply nested flow collections is quadratic."""
    total = 0
    aliases = 0
    sizes: dict[str, int] = {}  # anchor -> the values its node stands for
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, total before)
    open_anchors: set[str] = set()

    def count(n: int, mark) -> None:
        nonlocal total
        total += n
        if total > limits.max_nodes:
            raise DocumentError(
                f"The YAML stands for more than {limits.max_nodes:,} values once its aliases "
                f"are expanded{_where(mark)}; a recipe file is far smaller (nested anchors "
                "and aliases are refused)."
            )

    for event in yaml.parse(text, Loader=_LOADER):
        mark = event.start_mark
        if isinstance(event, AliasEvent):
            aliases += 1
            if aliases > limits.max_aliases:
                raise DocumentError(
                    f"The YAML has more than {limits.max_aliases} aliases (*name){_where(mark)}."
                )
            if event.anchor in open_anchors:
                raise DocumentError(
                    f"The alias *{clip(event.anchor, 40)} is inside the node it names (a "
                    f"structure that contains itself){_where(mark)}."
                )
            count(sizes.get(event.anchor, 1), mark)
        elif isinstance(event, ScalarEvent):
            if len(event.value) > limits.max_scalar_chars:
                raise DocumentError(
                    f"A text of {len(event.value):,} characters{_where(mark)} is longer than "
                    f"the {limits.max_scalar_chars:,} characters any recipe value needs."
                )
            count(1, mark)
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, CollectionStartEvent):
            if len(stack) >= limits.max_depth:
                raise DocumentError(
                    f"The YAML is nested more than {limits.max_depth} levels deep{_where(mark)}."
                )
            stack.append((event.anchor, total))
            if event.anchor is not None:
                open_anchors.add(event.anchor)
            count(1, mark)
        elif isinstance(event, CollectionEndEvent) and stack:
            anchor, before = stack.pop()
            if anchor is not None:
                open_anchors.discard(anchor)
                sizes[anchor] = total - before


class _Constructor(_LOADER):
    """The safe loader, refusing numbers longer than any setting (int() of 5,000 digits
    is refused by Python itself, with a ValueError no caller expects)."""

    limits: Limits = YAML_LIMITS

    def _short_number(self, node) -> None:
        if len(node.value) > self.limits.max_number_chars:
            raise DocumentError(
                f"A number of {len(node.value):,} characters{_where(node.start_mark)}: no "
                f"setting takes more than {self.limits.max_number_chars}."
            )

    def construct_yaml_int(self, node):
        self._short_number(node)
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        self._short_number(node)
        return super().construct_yaml_float(node)


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)
_Constructor.add_constructor("tag:yaml.org,2002:float", _Constructor.construct_yaml_float)


def load_yaml(text: str | bytes, limits: Limits = YAML_LIMITS) -> object:
    """One YAML document as Python values, within `limits`; DocumentError otherwise."""
    text = _size_check(text, limits, "The YAML")
    loader = (
        _Constructor
        if limits is YAML_LIMITS
        else type("_BoundedConstructor", (_Constructor,), {"limits": limits})
    )
    try:
        _measure(text, limits)
        return yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentError(f"not valid YAML{_where(mark)}: {clip(problem, 300)}") from None
    except DocumentError:
        raise
    except (ValueError, OverflowError) as exc:
        # A constructor's own check, e.g. a date such as 2024-13-45.
        raise DocumentError(f"not valid YAML: {clip(str(exc), 300)}") from None


# --- JSON ------------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def load_json(text: str | bytes, limits: Limits = JSON_LIMITS, what: str = "The JSON") -> object:
    """One JSON value within `limits`; DocumentError (naming `what`) otherwise.

    json.loads is recursive C: the nesting is measured first, on the text with its strings
    taken out (a bracket inside a string is no nesting)."""
    text = _size_check(text, limits, what)
    brackets = _JSON_BRACKET.findall(_JSON_STRING.sub("", text))
    if brackets:
        deepest = max(accumulate(1 if b in "[{" else -1 for b in brackets))
        if deepest > limits.max_depth:
            raise DocumentError(f"{what} is nested more than {limits.max_depth} levels deep.")

    def number(kind: str):
        def parse(literal: str):
            if len(literal) > limits.max_number_chars:
                raise DocumentError(
                    f"{what} has a number of {len(literal):,} characters; no setting takes "
                    f"more than {limits.max_number_chars}."
                )
            value = int(literal) if kind == "int" else float(literal)
            if kind == "float" and not (math.isfinite(value) and abs(value) <= limits.max_float):
                raise DocumentError(
                    f"{what} has the number {clip(literal, 40)}, outside ±{limits.max_float:g}."
                )
            return value

        return parse

    def constant(name: str):
        raise DocumentError(f"{what} has {name}, which is not a number JSON allows.")

    try:
        return json.loads(
            text, parse_int=number("int"), parse_float=number("float"), parse_constant=constant
        )
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:  # the depth check above makes this unreachable; never a 500
        raise DocumentError(f"{what} is nested too deeply.") from None
