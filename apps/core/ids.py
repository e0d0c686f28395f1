"""Ids typed into forms and query strings: junk is None, never a 500.

ASCII digits only ("²".isdigit() is true and int("²") fails) and at most 18 of them: a
larger number overflows SQLite's integer inside an `__in` lookup (Django answers an
out-of-range `pk=` with no rows, but not every lookup)."""

from __future__ import annotations

MAX_DIGITS = 18


def form_id(value) -> int | None:
    """A positive id from a form field or a query parameter; None for anything else."""
    text = str(value if value is not None else "").strip()
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    number = int(text)
    return number if number > 0 else None


def form_ids(values, limit: int) -> list[int]:
    """The ids among `values` (each may be a comma-separated list), in order, each once:
    one more than `limit` at most, so that a caller can tell "too many". A value's first
    10 × limit + 10 parts are read, no more (a long list costs nothing)."""
    out: list[int] = []
    for value in values:
        for part in str(value).split(",", 10 * limit + 10)[: 10 * limit + 10]:
            number = form_id(part)
            if number is not None and number not in out:
                out.append(number)
            if len(out) > limit:
                return out
    return out
