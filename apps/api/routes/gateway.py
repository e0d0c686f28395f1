"""The gateway's usage and keys (docs/gateway.md): the same sums as the Usage page, and a
user's own gateway keys (created here as on the profile page: the clear key is in the
answer once). Admins (manage users) may ask for everyone's usage or one user's."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from apps.accounts.roles import MANAGE_USERS, USE_CHAT, VIEW_PANEL
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.routes.common import get_or_404
from apps.api.schemas import Strict
from apps.gateway import usage
from apps.gateway.keys import TooManyKeys, key_create, key_revoke
from apps.gateway.models import GatewayKey

router = Router(tags=["gateway"])
CSV_RESPONSE = {"responses": {200: {"description": "CSV, one row per request",
                "content": {"text/csv": {"schema": {"type": "string"}}}}}}  # fmt: skip


class UsageQuery(Schema):
    days: int = Field(7, ge=1, le=366, description="How far back")
    by: str = Field("day", pattern="^(day|hour)$", description="Buckets of the series")
    model: str | None = Field(None, max_length=128)
    user: str | None = Field(
        None, max_length=150, description="A username (admins); 'all' for everyone (admins)"
    )


class UsageCounts(Schema):
    requests: int
    prompt: int
    completion: int
    total: int
    errors: int
    cancelled: int


class UsageBucket(UsageCounts):
    t: datetime


class UsageLine(UsageCounts):
    user: str | None
    model: str


class UsageOut(Schema):
    since: datetime
    user: str | None
    model: str | None
    totals: dict
    by_user_and_model: list[UsageLine]
    series: list[UsageBucket]


def _scope(request: HttpRequest, q: UsageQuery):
    """(queryset, the user it is about or None for everyone)."""
    since = timezone.now() - timedelta(days=q.days)
    who = request.user
    if q.user:
        if not request.user.has_perm(MANAGE_USERS):
            if q.user != request.user.get_username():
                raise ApiError(403, "Only admins may see other users' usage.", code="forbidden")
        elif q.user == "all":
            who = None
        else:
            who = get_user_model().objects.filter(username=q.user).first()
            if who is None:
                raise ApiError(404, f"No user {q.user!r}.", code="not_found")
    return usage.rows(since=since, user=who, model=q.model), who, since


@router.get("/usage", response={200: UsageOut, **ERRORS}, summary="Usage: requests and tokens")
def usage_summary(request: HttpRequest, q: Query[UsageQuery]):
    """Requests through the gateway and chat answers, per user and model, and a series per
    day or hour (your own; admins: `user=all` or a username)."""
    require(request, VIEW_PANEL)
    usage.drain(wait_s=0.5)
    qs, who, since = _scope(request, q)
    lines = [{**r, "user": r.pop("user__username")} for r in usage.by_user_and_model(qs)]
    return {"since": since, "user": who.get_username() if who else None, "model": q.model,
            "totals": qs.aggregate(**usage.TOTALS), "by_user_and_model": lines,
            "series": usage.series(qs, q.by)}  # fmt: skip


@router.get("/usage.csv", response={200: None, **ERRORS}, summary="Usage rows as CSV",
            openapi_extra=CSV_RESPONSE)  # fmt: skip
def usage_csv(request: HttpRequest, q: Query[UsageQuery]):
    """One line per request (at most 100 000, oldest first)."""
    require(request, VIEW_PANEL)
    usage.drain(wait_s=0.5)
    qs, _, _ = _scope(request, q)
    return HttpResponse(usage.csv_text(qs), content_type="text/csv; charset=utf-8")


class KeyOut(Schema):
    id: int
    name: str
    prefix: str
    models: list[str]
    expires_at: datetime | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
    requests: int = 0
    tokens: int = 0


class KeyCreated(KeyOut):
    key: str = Field(description="The clear key: shown this once, never again")


class KeyIn(Strict):
    name: str = Field("key", min_length=1, max_length=100)
    models: list[str] = Field(default_factory=list, max_length=50)
    expires_days: int | None = Field(None, ge=1, le=3650)


def key_out(key: GatewayKey, used: dict | None = None) -> dict:
    used = used or {}
    return {"id": key.pk, "name": key.name, "prefix": key.prefix, "models": key.model_names,
            "expires_at": key.expires_at, "created_at": key.created_at,
            "last_used_at": key.last_used_at, "revoked_at": key.revoked_at,
            "requests": used.get("requests", 0), "tokens": used.get("tokens", 0)}  # fmt: skip


@router.get("/gateway/keys", response={200: list[KeyOut], **ERRORS}, summary="My gateway keys")
def keys_list(request: HttpRequest):
    require(request, USE_CHAT)
    usage.drain(wait_s=0.5)
    used = usage.per_key(request.user)
    return [key_out(k, used.get(k.pk)) for k in GatewayKey.objects.filter(user=request.user)]


@router.post("/gateway/keys", auth=needs(USE_CHAT), response={201: KeyCreated, **ERRORS},
             summary="Create a gateway key")  # fmt: skip
def keys_create(request: HttpRequest, payload: KeyIn):
    """The clear key is in the answer once. 409 `too_many_keys` when you hold
    GATEWAY_KEYS_PER_USER_MAX working keys (20 unless the admin set it): revoke one first."""
    models = [m.strip() for m in payload.models if m.strip()]
    if any(len(m) > 128 for m in models):
        raise ApiError(422, "A model name has at most 128 characters.", code="invalid")
    days = payload.expires_days
    expires = timezone.now() + timedelta(days=days) if days else None
    try:
        key, clear = key_create(user=request.user, name=payload.name, models=models,
                                expires_at=expires)  # fmt: skip
    except TooManyKeys as exc:
        raise ApiError(409, str(exc), code="too_many_keys") from None
    return 201, {**key_out(key), "key": clear}


@router.delete("/gateway/keys/{key_id}", auth=needs(USE_CHAT),
               response={200: KeyOut, **ERRORS}, summary="Revoke a gateway key")  # fmt: skip
def keys_revoke(request: HttpRequest, key_id: int):
    key = get_or_404(GatewayKey.objects.filter(user=request.user), "gateway key", pk=key_id)
    return key_out(key_revoke(key=key))
