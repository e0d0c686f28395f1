"""CSV that a spreadsheet opens as data, never as formulas (OWASP "CSV Injection").

Every CSV the panel produces is written through `csv_text`. A text cell that starts with
`=`, `+`, `-`, `@`, a tab or a carriage return is a formula (or the start of one) to Excel,
LibreOffice and Google Sheets, so such a cell gets a single quote in front: `=HYPERLINK(…)`
is written as `'=HYPERLINK(…)` and shown as that text. The csv module quotes and escapes
the rest (commas, double quotes, newlines).

Only text is escaped. Numbers the panel computed (ints, floats, Decimals: a negative
latency delta, `-1.5`) are written as numbers, because they are values, not text a person
typed, and a spreadsheet must still be able to sum them. A *string* that merely looks like
a negative number (`"-1.5"` in a recipe name) is text and is escaped like any other.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence

# OWASP's list: the four formula prefixes, and tab and carriage return (which some
# spreadsheet programs skip before looking for one).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> object:
    """The value as a spreadsheet should see it: text that could start a formula gets a
    leading `'`; numbers, booleans and None pass unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def csv_text(fieldnames: Sequence[str], rows: Iterable[Mapping[str, object]]) -> str:
    """A CSV document: a header of `fieldnames`, then one line per row, every cell (the
    header's too) made safe."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([safe_cell(name) for name in fieldnames])
    for row in rows:
        writer.writerow([safe_cell(row.get(name)) for name in fieldnames])
    return out.getvalue()
