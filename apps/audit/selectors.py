"""Reading the audit log: filters (who, what, which kind of thing, since, until, text) with
bounds, as the page, its CSV export and the API use them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date

from apps.audit.models import AuditEntry

MAX_TEXT = 100  # a filter's text
CSV_MAX_ROWS = 50_000  # one export


@dataclass(frozen=True)
class AuditFilter:
    actor: str = ""
    action: str = ""
    target_type: str = ""
    since: str = ""  # YYYY-MM-DD, inclusive
    until: str = ""  # YYYY-MM-DD, inclusive
    q: str = ""

    @classmethod
    def from_params(cls, params) -> tuple[AuditFilter, list[str]]:
        """The filter from query parameters, and the errors of the ones that cannot be
        used (each is then left out, never guessed)."""
        errors: list[str] = []
        values = {}
        for name in ("actor", "action", "target_type", "q"):
            text = (params.get(name) or "").strip()
            if len(text) > MAX_TEXT:
                errors.append(f"{name}: at most {MAX_TEXT} characters")
                text = ""
            values[name] = text
        for name in ("since", "until"):
            text = (params.get(name) or "").strip()
            if text and parse_date_safe(text) is None:
                errors.append(f"{name}: a date as YYYY-MM-DD, not {text[:20]!r}")
                text = ""
            values[name] = text
        return cls(**values), errors


def parse_date_safe(text: str):
    try:
        return parse_date(text)
    except ValueError:
        return None


def entries(f: AuditFilter) -> QuerySet[AuditEntry]:
    rows = AuditEntry.objects.select_related("actor")
    if f.actor:
        rows = rows.filter(actor_name__iexact=f.actor)
    if f.action:
        rows = (
            rows.filter(action=f.action)
            if "." in f.action
            else rows.filter(action__startswith=f.action + ".")
        )
    if f.target_type:
        rows = rows.filter(target_type=f.target_type)
    tz = timezone.get_current_timezone()
    if f.since:
        start = datetime.combine(parse_date(f.since), time.min, tzinfo=tz)
        rows = rows.filter(at__gte=start)
    if f.until:
        end = datetime.combine(parse_date(f.until), time.min, tzinfo=tz) + timedelta(days=1)
        rows = rows.filter(at__lt=end)
    if f.q:
        rows = rows.filter(
            Q(target__icontains=f.q) | Q(message__icontains=f.q) | Q(actor_name__icontains=f.q)
        )
    return rows


def choices() -> dict:
    """What the filters offer: the actions, kinds and names the log holds."""
    return {
        "actions": sorted(set(AuditEntry.objects.values_list("action", flat=True).distinct())),
        "target_types": sorted(
            set(AuditEntry.objects.values_list("target_type", flat=True).distinct())
        ),
        "actors": sorted(
            set(AuditEntry.objects.exclude(actor_name="").values_list("actor_name", flat=True))
        ),
    }


CSV_FIELDS = ("at", "actor", "source", "address", "action", "target_type", "target_id",
              "target", "message", "changes", "before", "after")  # fmt: skip


def csv_rows(rows: QuerySet[AuditEntry]):
    import json

    for entry in rows[:CSV_MAX_ROWS].iterator():
        yield {
            "at": entry.at.isoformat(),
            "actor": entry.actor_name or entry.get_source_display(),
            "source": entry.source,
            "address": entry.address or "",
            "action": entry.action,
            "target_type": entry.target_type,
            "target_id": entry.target_id,
            "target": entry.target,
            "message": entry.message,
            "changes": json.dumps(entry.changes, ensure_ascii=False) if entry.changes else "",
            "before": json.dumps(entry.before, ensure_ascii=False) if entry.before else "",
            "after": json.dumps(entry.after, ensure_ascii=False) if entry.after else "",
        }
