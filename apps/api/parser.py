"""The API's one JSON parser (`NinjaAPI(parser=BoundedJSONParser())`): a request body is
UTF-8 JSON of bounded depth with numbers a float or an int64 can hold, or it is refused
with a 400 that says which rule it broke.

Python's own `json.loads` accepts `NaN`/`Infinity`, turns `1e400` into infinity, raises
deep inside its C scanner on 100,000 nested brackets and refuses 5,000-digit integers only
with an obscure ValueError; each of those reached a view (or a traceback) before. Here the
number hooks check the literal's text before converting it, so no conversion does work
proportional to a hostile literal, and the nesting is measured before any schema sees it.
"""

from __future__ import annotations

import json
import math

from django.http import HttpRequest
from ninja.parser import Parser

MAX_DEPTH = 32  # the API's bodies nest 2 levels; a document deeper than this is not ours
MAX_INT_DIGITS = 19  # an int64 (9,223,372,036,854,775,807) has 19 digits
MAX_NUMBER_CHARS = 40  # "-1.2345678901234567e-308" is 24: room for any float's spelling
JSON_TYPES = ("application/json",)


class BadBody(ValueError):
    """A body the API will not read; the message is the client's (errors.install shows it)."""


def _int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise BadBody(
            f"A whole number in the body has {digits} digits; at most {MAX_INT_DIGITS} "
            "(a 64-bit integer) are accepted."
        )
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise BadBody(
            f"A number in the body is {len(text)} characters long; at most "
            f"{MAX_NUMBER_CHARS} are accepted."
        )
    value = float(text)
    if not math.isfinite(value):
        raise BadBody(f"The number {text} is too large for a 64-bit float.")
    return value


def _constant(text: str):
    raise BadBody(f"{text} is not a JSON number: send a finite number or null.")


def _check_depth(value) -> None:
    """Iteratively (no recursion a hostile document could exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_DEPTH:
            raise BadBody(f"The JSON body nests deeper than {MAX_DEPTH} levels.")
        stack.extend((child, depth + 1) for child in children)


def loads(data: bytes | str):
    """Parse one JSON document under the API's bounds; BadBody says what is wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadBody(
                f"The body is not UTF-8 text (byte {exc.start} cannot be decoded)."
            ) from None
    try:
        value = json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise BadBody(f"The JSON body nests deeper than {MAX_DEPTH} levels.") from None
    except json.JSONDecodeError as exc:
        raise BadBody(
            f"The body cannot be parsed as JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    _check_depth(value)
    return value


def content_type_problem(request: HttpRequest) -> str | None:
    """What is wrong with the body's declared type, if anything: JSON bodies only (a body
    without a Content-Type is read as JSON, like curl's `-d` with the docs' header)."""
    declared = request.content_type or ""
    if not declared or declared in JSON_TYPES or declared.endswith("+json"):
        return None
    return f"Send the body as JSON with Content-Type: application/json (not {declared})."


class BoundedJSONParser(Parser):
    def parse_body(self, request: HttpRequest):
        problem = content_type_problem(request)
        if problem:
            raise BadBody(problem)
        return loads(request.body)
