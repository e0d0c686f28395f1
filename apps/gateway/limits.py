"""Which limits apply to a user: their own row's fields, else their role's (admin pages:
Gateway › Limits). Enforced in Redis by apps/gateway/store.py; shown on the profile page."""

from __future__ import annotations

from dataclasses import dataclass

from apps.accounts.services import user_role
from apps.gateway.models import Limit


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    concurrent: int | None = None
    tpd: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.rpm, self.concurrent, self.tpd))


def limits_for(user) -> Limits:
    role = user_role(user)
    rows = {
        ("user" if row.user_id else "role"): row
        for row in Limit.objects.filter(user=user)
        | Limit.objects.filter(role=role.value if role else "-", user__isnull=True)
    }
    mine, theirs = rows.get("user"), rows.get("role")

    def pick(field: str) -> int | None:
        for row in (mine, theirs):
            value = getattr(row, field, None) if row is not None else None
            if value is not None:
                return value
        return None

    return Limits(
        rpm=pick("requests_per_minute"),
        concurrent=pick("concurrent_streams"),
        tpd=pick("tokens_per_day"),
    )
