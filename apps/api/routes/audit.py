"""The audit log (docs/audit.md): admins (who manage users) only, read-only, newest first,
with the page's filters."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.pagination import paginate
from pydantic import Field

from apps.accounts.roles import MANAGE_USERS
from apps.api.auth import needs, require
from apps.api.errors import ERRORS, ApiError
from apps.api.pagination import Page
from apps.audit import selectors

router = Router(tags=["audit"])


class AuditQuery(Schema):
    actor: str = Field("", max_length=100, description="A username")
    action: str = Field(
        "", max_length=100, description="e.g. run.start, or run for every run action"
    )
    target_type: str = Field(
        "", max_length=100, description="recipe, run, host, pair, suite, user, token, key"
    )
    since: str = Field("", max_length=10, description="YYYY-MM-DD, inclusive")
    until: str = Field("", max_length=10, description="YYYY-MM-DD, inclusive")
    q: str = Field("", max_length=100, description="Text in the target, the message or the name")


class AuditOut(Schema):
    id: int
    at: datetime
    actor: str | None = Field(
        None,
        description="The username (at the command line: the machine's user and the "
        "command), or null for the panel itself",
    )
    source: str = Field(description="web, api, admin, system, watchdog or command")
    address: str | None
    action: str
    target_type: str
    target_id: str
    target: str
    message: str
    before: dict | None
    after: dict | None
    changes: dict

    @staticmethod
    def resolve_actor(entry) -> str | None:
        return entry.actor_name or None


@router.get("/audit", response={200: list[AuditOut], **ERRORS}, summary="The audit log",
            auth=needs(MANAGE_USERS))  # fmt: skip
@paginate(Page)
def list_audit(request: HttpRequest, filters: Query[AuditQuery]):
    """One row per action that changed something, newest first. Admins only."""
    require(request, MANAGE_USERS)
    f, errors = selectors.AuditFilter.from_params(filters.dict())
    if errors:
        raise ApiError(422, "; ".join(errors), fields={"filters": errors})
    return selectors.entries(f)
