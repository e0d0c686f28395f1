"""SparkPanel's JSON API, version 1: /api/v1/ (schema at /api/v1/openapi.json, docs at
/api/v1/docs)."""

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest
from ninja import NinjaAPI

from apps.accounts.roles import CAPABILITIES, VIEW_PANEL, perm
from apps.accounts.services import user_role
from apps.api import errors
from apps.api.auth import AUTH, require
from apps.api.parser import BoundedJSONParser
from apps.api.routes import audit, gateway, hosts, jobs, planner, recipes, runs, weights
from apps.api.schemas import MeOut
from apps.api.tokens import token_user

DESCRIPTION = """
Everything a script or CI job needs from SparkPanel: hosts and their memory, recipes (create,
update, YAML import), runs (start, stop, follow), benchmark jobs (queue, follow, cancel,
results as JSON or CSV, compare) and the memory planner.

**Authentication**: a personal token from your profile page (click your name at the top
right → *API tokens*), sent as `Authorization: Bearer spk_…`. A token acts with its
owner's role; every endpoint checks the same permissions as the pages. In this page you
are signed in with your browser session.

**Errors** always look like `{"error": {"code", "message", "fields"}}`: 400 unreadable
request (not UTF-8 JSON sent as `application/json`, nested deeper than 32 levels, a whole
number over 19 digits, a number beyond a 64-bit float, NaN or Infinity), 401
missing/invalid/revoked token, 403 the role does not allow it, 404 no such object, 409
conflicts with the current state (host busy, job already finished), 422 invalid input with
messages per field (every number has its bounds in this schema), 503 the database is busy
or restarting (nothing was saved; retry).

**Lists** are paginated: `?limit=50&offset=0` → `{items, count, limit, offset, next_offset}`.

**Retries**: send an `Idempotency-Key` header when queueing a job; a retry with the same key
returns the same job instead of queueing another. See docs/api.md for curl examples and the
`manage.py spark` command line.
"""


def _docs_login(view):
    """The schema and the docs page: a token or a signed-in session with a role."""

    def wrapped(request: HttpRequest, *args, **kwargs):
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            user = token_user(header[7:].strip())
            if user is not None:
                request.user = user
        if not request.user.is_authenticated:
            if request.path.endswith(".json"):  # a script: answer like the rest of the API
                return errors.json_error(401, "unauthenticated", errors.NO_TOKEN)
            return redirect_to_login(request.get_full_path())
        if not request.user.has_perm(VIEW_PANEL):
            return errors.json_error(403, "forbidden", errors.NO_ROLE)
        return view(request, *args, **kwargs)

    return wrapped


api = NinjaAPI(
    title="SparkPanel API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api-v1",
    auth=AUTH,
    docs_decorator=_docs_login,
    parser=BoundedJSONParser(),  # bounded depth and numbers, UTF-8 JSON only (parser.py)
)
errors.install(api)
for module in (hosts, recipes, runs, jobs, planner, weights, gateway, audit):
    api.add_router("/", module.router)


@api.get("/me", response={200: MeOut, **errors.ERRORS}, tags=["account"], summary="Who am I")
def me(request: HttpRequest):
    """The token's (or session's) user, role and permissions."""
    require(request, VIEW_PANEL)
    role = user_role(request.user)
    return {
        "username": request.user.get_username(),
        "role": role.value if role else None,
        "permissions": sorted(c for c in CAPABILITIES if request.user.has_perm(perm(c))),
    }
