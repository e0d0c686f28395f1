from typing import Any

from ninja import Field, Schema
from ninja.pagination import PaginationBase

MAX_LIMIT = 200


class Page(PaginationBase):
    """`?limit=&offset=` → {"items", "count", "limit", "offset", "next_offset"}; follow
    next_offset until it is null."""

    class Input(Schema):
        limit: int = Field(50, ge=1, le=MAX_LIMIT)
        offset: int = Field(0, ge=0, le=2**31)

    class Output(Schema):
        items: list[Any]
        count: int
        limit: int
        offset: int
        next_offset: int | None

    def paginate_queryset(self, queryset, pagination: Input, **params) -> dict:
        count = self._items_count(queryset)
        start, limit = pagination.offset, pagination.limit
        end = start + limit
        return {
            "items": queryset[start:end],
            "count": count,
            "limit": limit,
            "offset": start,
            "next_offset": end if end < count else None,
        }
