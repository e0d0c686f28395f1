"""Which limits apply to a user: their own row's fields, else their role's; a key may have
limits of its own on top (a request must pass both). Set by admins on the Limits page
(apps/gateway/limit_views.py) or in Django admin; enforced in Redis by
apps/gateway/store.py; shown on the profile page."""

from __future__ import annotations

from dataclasses import dataclass

from apps.accounts.services import user_role
from apps.gateway.models import Limit

# The limit fields (apps/gateway/models.py::LimitFields) and the largest value the panel's
# forms take for each: far above any team's use, low enough that a slip of the keyboard
# (an extra few zeros) is an error, not a limit that silently never applies.
FIELDS = ("requests_per_minute", "concurrent_streams", "tokens_per_day")
BOUNDS = {"requests_per_minute": 100_000, "concurrent_streams": 10_000,
          "tokens_per_day": 10_000_000_000}  # fmt: skip


@dataclass(frozen=True)
class Limits:
    rpm: int | None = None
    concurrent: int | None = None
    tpd: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.rpm, self.concurrent, self.tpd))


def own_limits(row) -> Limits:
    """The limits a Limit row or a key carries itself (blank: none of this kind)."""
    return Limits(rpm=row.requests_per_minute, concurrent=row.concurrent_streams,
                  tpd=row.tokens_per_day)  # fmt: skip


def limit_save(*, values: dict, role: str = "", user=None) -> Limit | None:
    """Set a role's row (`role`) or a user's override (`user`) to `values` (every field of
    FIELDS; None: no limit of that kind). A row left with no limit at all is deleted (a
    user's role's limits apply again). Audited with who acted by apps/audit/signals.py;
    every gateway re-reads its keys' records at their next request (apps/gateway/receivers.py)."""
    rows = (
        Limit.objects.filter(user=user)
        if user is not None
        else Limit.objects.filter(role=role, user__isnull=True)
    )
    row = rows.first()
    if all(values[name] is None for name in FIELDS):
        if row is not None:
            row.delete()
        return None
    row = row or Limit(role="" if user is not None else role, user=user)
    for name in FIELDS:
        setattr(row, name, values[name])
    row.save()
    return row


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
