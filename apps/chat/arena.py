"""The team's arena: votes on side-by-side answers, counted per pair of recipes.

A vote names the column that answered a turn better (or a tie). For every pair of columns
with different recipes, the vote is a win for the pair's winner, or a tie when the vote is a
tie; a pair that does not hold the winner (three columns) is not counted. Read-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

from apps.chat.models import ArenaVote
from apps.recipes.models import Recipe

MAX_VOTES = 20_000  # the table reads at most this many recent votes


@dataclass
class PairRecord:
    a: int
    b: int
    a_wins: int = 0
    b_wins: int = 0
    ties: int = 0
    names: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.a_wins + self.b_wins + self.ties

    @property
    def a_name(self) -> str:
        return self.names.get(self.a, f"recipe {self.a} (deleted)")

    @property
    def b_name(self) -> str:
        return self.names.get(self.b, f"recipe {self.b} (deleted)")

    def a_share(self) -> float | None:
        """A's share of the decided votes, ties counted as half (None before any vote)."""
        return (self.a_wins + self.ties / 2) / self.total if self.total else None


def tally(votes) -> list[PairRecord]:
    """Pairs of recipes with their wins and ties, most-voted first."""
    pairs: dict[tuple[int, int], PairRecord] = {}
    for recipes, winner in votes:
        for (i, ra), (j, rb) in combinations(enumerate(recipes), 2):
            if ra is None or rb is None or ra == rb:
                continue
            a, b, ia, ib = (ra, rb, i, j) if ra < rb else (rb, ra, j, i)
            if winner is not None and winner not in (ia, ib):
                continue
            record = pairs.setdefault((a, b), PairRecord(a, b))
            if winner is None:
                record.ties += 1
            elif winner == ia:
                record.a_wins += 1
            else:
                record.b_wins += 1
    return sorted(pairs.values(), key=lambda r: (-r.total, r.a, r.b))


def table() -> list[PairRecord]:
    rows = ArenaVote.objects.order_by("-pk").values_list("recipes", "winner_column")
    records = tally(
        (recipes if isinstance(recipes, list) else [], winner)
        for recipes, winner in rows[:MAX_VOTES]
    )
    ids = {r.a for r in records} | {r.b for r in records}
    names = dict(Recipe.objects.filter(pk__in=ids).values_list("pk", "name"))
    for record in records:
        record.names = names
    return records
