"""sparkrun's {placeholder} rendering of the command, within bounds: each name filled in
once, a cycle refused, nesting and the filled command's length capped."""

from __future__ import annotations

import re
from collections.abc import Mapping

from sparkdomain.bounded import clip

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_SPAN = re.compile(r"\{[^{}]*\}")
# A filled-in vLLM command is a few hundred characters; placeholders that fill in values
# which fill in others stop at these bounds (a cycle is refused outright).
MAX_COMMAND_CHARS = 16_384
MAX_PLACEHOLDER_DEPTH = 10
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")


class PlaceholderError(ValueError):
    """The command's {placeholders} cannot be filled in within bounds."""


def render(command: str, values: Mapping[str, object]) -> str:
    """sparkrun's {placeholder} substitution; values may hold placeholders themselves.

    Each name is filled in once (then reused), a name met again inside its own value is
    refused (a cycle has no end), and so is nesting deeper than MAX_PLACEHOLDER_DEPTH or a
    result longer than MAX_COMMAND_CHARS: three copies of a value that holds three copies
    of the next one grow exponentially without any cycle."""
    filled: dict[str, str] = {}

    def fill(text: str, chain: tuple[str, ...]) -> str:
        if len(chain) > MAX_PLACEHOLDER_DEPTH:
            raise PlaceholderError(
                f"placeholders are nested more than {MAX_PLACEHOLDER_DEPTH} deep "
                f"({' → '.join('{' + clip(n, 30) + '}' for n in chain[:4])} → …)"
            )
        parts: list[str] = []
        size = 0
        position = 0
        for match in _PLACEHOLDER.finditer(text):
            name = match.group(1)
            parts.append(text[position : match.start()])
            position = match.end()
            if name not in values or values[name] is None:
                # sparkrun leaves a placeholder without a value as it is.
                parts.append(match.group(0))
            elif name in chain:
                loop = [*chain[chain.index(name) :], name]
                raise PlaceholderError(
                    f"the placeholder {{{clip(name, 30)}}} refers to itself ("
                    + " → ".join("{" + clip(n, 30) + "}" for n in loop[:6])
                    + ("…" if len(loop) > 6 else "")
                    + ")"
                )
            else:
                if name not in filled:
                    filled[name] = fill(_placeholder_text(values[name]), (*chain, name))
                parts.append(filled[name])
            size += len(parts[-1]) + len(parts[-2])
            if size > MAX_COMMAND_CHARS:
                break
        parts.append(text[position:])
        result = "".join(parts)
        if len(result) > MAX_COMMAND_CHARS:
            raise PlaceholderError(
                f"with its placeholders filled in, the command is longer than "
                f"{MAX_COMMAND_CHARS:,} characters (a vLLM command is a few hundred)"
            )
        return result

    return _CONTINUATION.sub(" ", _unmask(fill(_mask(command, escapes="{{" in command), ())))


_LEFT, _RIGHT = "\x00", "\x01"


def _mask(text: str, *, escapes: bool) -> str:
    """sparkrun 0.4's brace masking (utils/text.py::mask_non_placeholder_braces), scanning
    left to right: `{{`/`}}` are escapes — one literal brace when the command uses `{{`
    (eugr's run-recipe format, JSON in a command), else two — a `{key}` span is a
    placeholder, and any other brace is literal."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{}" and text.startswith(ch * 2, i):
            sentinel = _LEFT if ch == "{" else _RIGHT
            out.append(sentinel if escapes else sentinel * 2)
            i += 2
            continue
        if ch == "{":
            found = _SPAN.match(text, i)
            if found:
                out.append(found.group())
                i = found.end()
                continue
            out.append(_LEFT)
        elif ch == "}":
            out.append(_RIGHT)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _unmask(text: str) -> str:
    return text.replace(_LEFT, "{").replace(_RIGHT, "}")


def _placeholder_text(value: object) -> str:
    # A mapping or list in a placeholder is not a command-line value; its text is bounded
    # by what the document may hold, and cut to the command's own bound.
    # str() as sparkrun does: True, a mapping's Python repr (real recipes keep JSON as text).
    text = value if isinstance(value, str) else str(value)
    return text[: MAX_COMMAND_CHARS + 1]
