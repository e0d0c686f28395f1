"""Live state: every live element of a page can be rendered again from the server's current
state, and every change is pushed with a version.

A *live element* is an HTML element whose root has an `id` and a `data-live-src` (a URL
under /live/ that renders exactly that element, with the template partial the page uses).
The browser (static/js/events.js) fetches every live element of its page each time its
socket opens — the first connect and every reconnect — before it applies pushes, so a page
never keeps showing what changed while it was not listening.

Versions: one Redis counter for the whole panel. A version is taken *before* the state is
read, so a version never claims newer state than the HTML it comes with; the counter is
floored at Redis's clock in microseconds, so a Redis restart (which forgets the counter)
cannot make versions go back. The browser never replaces an element with an older version
than the one it shows. Pushes travel over /ws/events/ as `{"seq": N, "html": "...",
"changed": [ids]}`; a fetch answers with the header `X-Live-Seq: N`.

Personal elements (buttons with a CSRF token, a Cancel only its owner or an operator may
use) are never rendered for one user and pushed to all: a push names them in `changed`
and every page fetches its own copy.

This module is the mechanism only: the registry of element kinds, the versions, `push`
and the /live/ endpoint, plus core's own elements (the team notices). Each app declares
its elements and its push functions in its own `live.py` (apps/runs/live.py,
apps/benchmarks/live.py, apps/guard/live.py), which its AppConfig.ready() imports:
`live.register(kind, Element(...))`. Pushes are best effort: they never raise (Redis
down: logged and dropped — the next fetch on reconnect shows the truth).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ImproperlyConfigured
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.accounts.roles import VIEW_PANEL
from apps.core import redisconn
from apps.core.events import BROADCAST_GROUP
from apps.core.models import Notice

log = logging.getLogger(__name__)

LIVE_EVENT = "live.push"
REDIS_TIMEOUT_S = 1.0

# INCR, floored at Redis's own clock in microseconds (TIME answers seconds and µs). The
# floor is stored, so the next INCR continues from it. µs since 1970 stay below 2**53:
# exact in Lua's doubles and in JavaScript numbers. A Lua number is returned as an integer
# reply (never through tostring, which would print 14 significant digits).
_NEXT_VERSION = """
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('INCR', KEYS[1])
if v < floor then
  redis.call('SET', KEYS[1], string.format('%.0f', floor))
  v = floor
end
return v
"""


class LiveUnavailable(Exception):
    """Redis cannot be reached: no version can be taken."""


def _redis():
    return redisconn.shared_client(settings.REDIS_URL, timeout=REDIS_TIMEOUT_S)


def _prefix() -> str:
    config = settings.CHANNEL_LAYERS.get("default", {}).get("CONFIG", {})
    return f"{config.get('prefix', 'sparkpanel')}:live"


def next_version() -> int:
    """A version newer than every one taken before (also across Redis restarts)."""
    try:
        return int(_redis().eval(_NEXT_VERSION, 1, f"{_prefix()}:seq"))
    except redisconn.RedisError as exc:
        raise LiveUnavailable(str(exc)) from exc


def shared_hash(name: str) -> dict[str, str]:
    """Every field of a panel-wide Redis hash kept next to the versions (e.g. the guard's
    banners, apps/guard/live.py). Raises LiveUnavailable."""
    try:
        return _redis().hgetall(f"{_prefix()}:{name}")
    except redisconn.RedisError as exc:
        raise LiveUnavailable(str(exc)) from exc


def shared_hash_set(name: str, field: str, value: str) -> None:
    """Set one field of such a hash. Raises LiveUnavailable."""
    try:
        _redis().hset(f"{_prefix()}:{name}", field, value)
    except redisconn.RedisError as exc:
        raise LiveUnavailable(str(exc)) from exc


# --- the registry of live elements --------------------------------------------------------


@dataclass(frozen=True)
class Element:
    """One kind of live element: its DOM id and its template for a key (an object's id or
    a host's name), how to load its context, and whether it is personal (rendered per
    user, or per page from its data-live-src's query: never pushed, only named, and
    fetched by each page that shows it). `subject` names what its key is when other
    apps push everything that shows one (e.g. "host": `elements_about("host", name)`)."""

    dom_id: Callable[[str], str]
    template: str
    load: Callable[[str, object], dict]  # (key, request or None) -> template context
    personal: bool = False
    subject: str = ""


# kind -> Element; filled by each app's live.py (imported by its AppConfig.ready()).
ELEMENTS: dict[str, Element] = {}


def register(kind: str, element: Element) -> None:
    """Make `kind` a live element: /live/<kind>/<key>/ renders it, `push` pushes it. A kind
    belongs to one app: registering it twice is a configuration error."""
    if kind in ELEMENTS:
        raise ImproperlyConfigured(f"the live element {kind!r} is registered twice")
    ELEMENTS[kind] = element


def elements_about(subject: str, key: str) -> list[tuple[str, str]]:
    """Every registered element that shows this subject (e.g. a host), for `push`."""
    return [(kind, key) for kind, element in ELEMENTS.items() if element.subject == subject]


def render_element(kind: str, key: str, request=None) -> str:
    """One live element from current state (Http404 for an unknown kind or object)."""
    element = ELEMENTS.get(kind)
    if element is None:
        raise Http404("no such live element")
    return render_to_string(element.template, element.load(key, request), request=request)


# --- pushing ------------------------------------------------------------------------------


def _send(message: dict) -> None:
    async_to_sync(get_channel_layer().group_send)(BROADCAST_GROUP, message)


def push(
    elements: list[tuple[str, str]], *, extra_html: str = "", seq: int | None = None
) -> int | None:
    """Take a version, render the public elements from the database as it is now, and
    push them (personal ones by id only) to every open page. Returns the version, or None
    when nothing could be pushed. Never raises."""
    try:
        seq = seq if seq is not None else next_version()
        html, changed = [], []
        for kind, key in elements:
            element = ELEMENTS[kind]
            if element.personal:
                changed.append(element.dom_id(key))
                continue
            try:
                html.append(render_element(kind, key))
            except Http404:
                continue  # deleted meanwhile: nothing to show
        if extra_html:
            html.append(extra_html)
        if not html and not changed:
            return seq
        _send({"type": LIVE_EVENT, "seq": seq, "html": "".join(html), "changed": changed})
        return seq
    except Exception:  # Redis down, a template error: a push never breaks its caller
        log.warning("live push of %s failed", elements, exc_info=True)
        return None


# --- core's own elements: the team notices ----------------------------------------------------


def current_notices(limit: int = 5) -> list:
    """The notices every page shows: unexpired ones (Notice.objects.current() where the
    model has expiry), newest first."""
    current = getattr(Notice.objects, "current", None)
    qs = current() if callable(current) else Notice.objects.all()
    return list(qs.select_related("author").order_by("-created_at", "-pk")[:limit])


def notices_context() -> dict:
    """The current notices and when the first of them expires (the page fetches its
    notices again then: an expired notice leaves open pages too)."""
    notices = current_notices()
    expiries = [n.expires_at for n in notices if getattr(n, "expires_at", None)]
    return {"notices": notices, "next_expiry": min(expiries) if expiries else None}


def push_notices() -> int | None:
    """The notices strip of every page and the dashboard's list (personal: its Delete)."""
    return push([("notices", ""), ("notice-list", "")])


register("notices", Element(lambda k: "notices-strip", "core/partials/notices_strip.html",
                            lambda k, r: notices_context()))  # fmt: skip
register("notice-list", Element(lambda k: "notices", "core/partials/notice_list.html",
                                lambda k, r: notices_context(), personal=True))  # fmt: skip


# --- the endpoints --------------------------------------------------------------------------

UNAVAILABLE = (
    "Live updates are unavailable: Redis cannot be reached, so this part of the page may "
    "be out of date. Reload the page once Redis is back."
)


@never_cache
@require_GET
@permission_required(VIEW_PANEL, raise_exception=True)
def live_element(request: HttpRequest, kind: str, key: str = "") -> HttpResponse:
    """One live element rendered from current state, with its version in X-Live-Seq.
    Login and the view_panel capability are required (the middleware and the decorator);
    404 for an unknown element or object; 503 when Redis is down (no version to give)."""
    if kind not in ELEMENTS:
        raise Http404("no such live element")
    try:
        seq = next_version()  # before the state is read: never newer than what is shown
    except LiveUnavailable:
        response = HttpResponse(UNAVAILABLE, status=503, content_type="text/plain")
        response["Retry-After"] = "5"
        return response
    response = HttpResponse(render_element(kind, key, request))
    response["X-Live-Seq"] = str(seq)
    return response
