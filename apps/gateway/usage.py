"""Usage rows: from Redis (where the gateway queues them, off its hot path) into the
database, and the sums the Usage page, the profile page, the API and /metrics show.

`drain()` moves the queued rows in batches (under a Redis lock, so two drains never take
the same rows; a row is inserted at most once, by its request id). It runs every few
seconds (Celery beat: gateway.drain_usage) and before anything reads the rows, so a page
always shows every request that finished.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, F, Max, Q, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from apps.core import csvsafe
from apps.core.redisconn import RedisError
from apps.gateway import store
from apps.gateway.models import GatewayKey, UsageRecord, UsageTotal
from apps.runs.models import Run

log = logging.getLogger(__name__)
BATCH = 1000


def drain(max_batches: int = 100, wait_s: float = 2.0) -> int:
    """Move queued usage rows into the database; returns how many. Redis down: 0, logged."""
    moved = 0
    try:
        lock = store.usage_lock(wait_s)
        if not lock.acquire():
            return 0
        try:
            for _ in range(max_batches):
                batch = store.usage_batch(BATCH)
                if not batch:
                    break
                moved += _insert(batch)
                store.usage_trim(len(batch))
        finally:
            lock.release()
    except RedisError as exc:
        log.warning("usage: cannot drain the gateway's queue: %s", exc)
    return moved


def _insert(batch: list[str]) -> int:
    users = set(get_user_model().objects.values_list("pk", flat=True))
    rows, last_used = [], {}
    for raw in batch:
        try:
            item = json.loads(raw)
            at = datetime.fromtimestamp(float(item["at"]), tz=UTC)
            row = UsageRecord(
                request_id=str(item["id"])[:40],
                at=at,
                user_id=item["u"] if item.get("u") in users else None,
                key_id=item.get("k"),
                source=_source(item.get("src")),
                endpoint=str(item.get("ep", ""))[:40],
                model=str(item.get("m", ""))[:128],
                run_id=item.get("run"),
                host=str(item.get("h", ""))[:100],
                prompt_tokens=int(item.get("pt") or 0),
                completion_tokens=int(item.get("ct") or 0),
                ttft_ms=item.get("ttft"),
                duration_ms=float(item.get("dur") or 0),
                status=int(item.get("st") or 0),
                cancelled=bool(item.get("cx")),
                error=str(item.get("err") or "")[:300],
            )
        except (ValueError, KeyError, TypeError) as exc:
            log.error("usage: dropped a malformed row (%s): %.200s", exc, raw)
            continue
        rows.append(row)
        if row.key_id:
            last_used[row.key_id] = max(at, last_used.get(row.key_id, at))
    keys = set(GatewayKey.objects.filter(pk__in=last_used).values_list("pk", flat=True))
    runs = {r.run_id for r in rows if r.run_id}
    if runs:
        runs = set(Run.objects.filter(pk__in=runs).values_list("pk", flat=True))
    for row in rows:
        if row.key_id not in keys:
            row.key_id = None
        if row.run_id not in runs:
            row.run_id = None
    UsageRecord.objects.bulk_create(rows, ignore_conflicts=True, batch_size=500)
    for key_id in keys:
        GatewayKey.objects.filter(pk=key_id).update(last_used_at=last_used[key_id])
    return len(rows)


def prune(now: datetime | None = None, batch: int = 5000, max_batches: int = 200) -> int:
    """The retention policy: rows older than GATEWAY_USAGE_RETENTION_DAYS are added to their
    user's and model's `UsageTotal` and deleted, oldest first, in batches (each one
    transaction, so a total never counts a row that is still there, nor misses one that is
    gone). Returns how many rows went. Run hourly by Celery beat (gateway.prune_usage)."""
    days = settings.GATEWAY_USAGE_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    removed = 0
    for _ in range(max_batches):
        with transaction.atomic():
            ids = list(
                UsageRecord.objects.filter(at__lt=cutoff)
                .order_by("at", "pk")
                .values_list("pk", flat=True)[:batch]
            )
            if not ids:
                break
            old = UsageRecord.objects.filter(pk__in=ids)
            sums = old.values("user", "model").annotate(**TOTALS, through=Max("at"))
            for s in sums:
                total = UsageTotal.objects.filter(user_id=s["user"], model=s["model"]).first()
                if total is None:
                    total = UsageTotal.objects.create(
                        user_id=s["user"], model=s["model"], through=s["through"]
                    )
                UsageTotal.objects.filter(pk=total.pk).update(
                    requests=F("requests") + s["requests"],
                    errors=F("errors") + s["errors"],
                    prompt_tokens=F("prompt_tokens") + s["prompt"],
                    completion_tokens=F("completion_tokens") + s["completion"],
                    through=max(total.through, s["through"]),
                )
            removed += old.delete()[0]
        if len(ids) < batch:
            break
    if removed:
        log.info("usage: %d rows older than %d days summed into totals and deleted", removed, days)
    return removed


def _source(value) -> str:
    """A row's source: the chat's rows say so ("src"), the gateway's say nothing."""
    return value if value in UsageRecord.Source.values else UsageRecord.Source.GATEWAY


# --- sums ----------------------------------------------------------------------------------

# A request is one of three: answered, failed or cancelled (docs/gateway.md, "Usage").
# Cancelled: the client ended it — the chat's Stop, a /v1 client that closed its stream or
# left while waiting (status 499). Failed: it got an error answer — the model server, the
# panel or the request itself (status 400 or above), and nobody cancelled it. A row is
# never both: a stopped answer used to count as a failure too (its 499).
FAILED = Q(status__gte=400, cancelled=False)

TOTALS = {
    "requests": Count("pk"),
    "prompt": Sum("prompt_tokens", default=0),
    "completion": Sum("completion_tokens", default=0),
    "errors": Count("pk", filter=FAILED),
    "cancelled": Count("pk", filter=Q(cancelled=True)),
}


def rows(*, since: datetime, user=None, model: str | None = None):
    qs = UsageRecord.objects.filter(at__gte=since)
    if user is not None:
        qs = qs.filter(user=user)
    if model:
        qs = qs.filter(model=model)
    return qs


def by_user_and_model(qs) -> list[dict]:
    out = (
        qs.values("user__username", "model").annotate(**TOTALS).order_by("user__username", "model")
    )
    return [{**r, "total": r["prompt"] + r["completion"]} for r in out]


def series(qs, bucket: str) -> list[dict]:
    trunc = TruncHour("at") if bucket == "hour" else TruncDay("at")
    out = qs.annotate(t=trunc).values("t").annotate(**TOTALS).order_by("t")
    return [{**r, "total": r["prompt"] + r["completion"]} for r in out]


def counters() -> list[dict]:
    """Every request ever counted, per user and model: the rows kept plus the totals of
    those the retention policy deleted (the panel's /metrics counters never go down)."""
    out: dict[tuple[str, str], dict] = {}
    for row in by_user_and_model(UsageRecord.objects.all()):
        out[(row["user__username"] or "", row["model"])] = row
    for t in UsageTotal.objects.select_related("user"):
        key = (t.user.username if t.user else "", t.model)
        row = out.setdefault(key, {"user__username": key[0], "model": key[1], "requests": 0,
                                   "errors": 0, "prompt": 0, "completion": 0})  # fmt: skip
        row["requests"] += t.requests
        row["errors"] += t.errors
        row["prompt"] += t.prompt_tokens
        row["completion"] += t.completion_tokens
    return [out[k] for k in sorted(out)]


def per_key(user) -> dict[int, dict]:
    qs = UsageRecord.objects.filter(user=user, key__isnull=False)
    since = timezone.now() - timedelta(days=30)
    out = {}
    for r in qs.values("key").annotate(
        requests=Count("pk"),
        tokens=Sum("prompt_tokens", default=0) + Sum("completion_tokens", default=0),
        recent=Count("pk", filter=Q(at__gte=since)),
        last=Max("at"),
    ):
        out[r["key"]] = r
    return out


def today_tokens(user) -> int:
    start = timezone.now().astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    agg = UsageRecord.objects.filter(user=user, at__gte=start).aggregate(
        p=Sum("prompt_tokens", default=0), c=Sum("completion_tokens", default=0)
    )
    return agg["p"] + agg["c"]


CSV_FIELDS = ["at", "user", "key", "source", "endpoint", "model", "run", "host",
              "prompt_tokens", "completion_tokens", "ttft_ms", "duration_ms", "status",
              "cancelled", "error"]  # fmt: skip
CSV_MAX_ROWS = 100_000


def csv_text(qs) -> str:
    """One line per request, through the panel's one CSV writer (apps/core/csvsafe.py): a
    key's name, a model, a host or a username that starts a formula (`=HYPERLINK(…)`,
    `-2+3`) is text in a spreadsheet, never run."""
    rows = (
        {"at": r.at.isoformat(), "user": r.user.username if r.user else "",
         "key": r.key.name if r.key else "", "source": r.source, "endpoint": r.endpoint,
         "model": r.model, "run": r.run_id or "", "host": r.host,
         "prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
         "ttft_ms": "" if r.ttft_ms is None else round(r.ttft_ms, 1),
         "duration_ms": round(r.duration_ms, 1), "status": r.status,
         "cancelled": int(r.cancelled), "error": r.error}
        for r in qs.select_related("user", "key").order_by("at")[:CSV_MAX_ROWS]
    )  # fmt: skip
    return csvsafe.csv_text(CSV_FIELDS, rows)


# What each refusal code means on the Usage page (the codes the gateway answers with,
# docs/gateway.md; key_expired is counted apart from invalid_api_key).
REFUSAL_WORDS = {
    "missing_api_key": "no key", "invalid_api_key": "not a valid key",
    "key_expired": "expired key", "no_role": "no role that may use models",
    "model_not_allowed": "model not allowed for the key",
    "requests_per_minute": "over requests per minute",
    "concurrent_requests": "over requests at once", "tokens_per_day": "over tokens per day",
    "origin_not_allowed": "browser origin not allowed",
}  # fmt: skip


def refusals_today(user=None) -> list[dict]:
    """Requests the gateway refused today (UTC) before they reached a model — no key, a
    bad one, a limit — per user and reason, most first: everyone's, or one user's. Those
    without a key have no user ("(no key)"); a user's own view leaves them out."""
    day = int(timezone.now().timestamp()) // 86400
    counts = store.refusals(day)
    ids = {int(who) for who, _ in counts if who.isdigit()}
    names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
    out = []
    for (who, code), count in counts.items():
        if user is not None and who != str(user.pk):
            continue
        name = names.get(int(who), "(deleted)") if who.isdigit() else "(no key)"
        out.append({"user": name, "code": code, "reason": REFUSAL_WORDS.get(code, code),
                    "count": count})  # fmt: skip
    return sorted(out, key=lambda r: (-r["count"], r["user"], r["code"]))


def refusal_counters() -> list[tuple[str, str, int]]:
    """(username or "", code, count since the start) for /metrics."""
    counts = store.refusals()
    ids = {int(who) for who, _ in counts if who.isdigit()}
    names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
    return sorted(
        (names.get(int(who), "(deleted)") if who.isdigit() else "", code, count)
        for (who, code), count in counts.items()
    )
