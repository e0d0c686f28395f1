"""The names of a comparison's answers and of the votes on them, one set for every page
that shows them: the compare page (its columns, its vote buttons, what a vote says) and
the arena (its recent votes). "B" is the same answer everywhere: the second column from
the left, and "B is better" the same vote on both pages (and the vote's `winner` value in
the compare page's POST: a side's letter or `tie`)."""

from __future__ import annotations

SIDES = "ABC"  # a comparison's answers, left to right (at most Comparison.MAX_COLUMNS)
TIE = "Tie"


def side(column: int) -> str:
    """A column's name: "A" for the first from the left."""
    return SIDES[column] if 0 <= column < len(SIDES) else str(column + 1)


def verdict(winner_column: int | None) -> str:
    """A vote in words: "B is better", or "Tie"."""
    return TIE if winner_column is None else f"{side(winner_column)} is better"
