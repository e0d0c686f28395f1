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

The push functions (`push_run`, `push_job`, `push_host`, `push_banners`, `push_notices`)
are best effort: they never raise (Redis down: logged and dropped — the next fetch on
reconnect shows the truth).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.accounts.roles import VIEW_PANEL
from apps.core.events import BROADCAST_GROUP

log = logging.getLogger(__name__)

LIVE_EVENT = "live.push"
# Banners of a guard that said "back to normal" are shown this long, then dropped.
OK_BANNER_S = 600
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


_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def _redis() -> redis.Redis:
    url = settings.REDIS_URL
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(
                url,
                socket_connect_timeout=REDIS_TIMEOUT_S,
                socket_timeout=REDIS_TIMEOUT_S,
                decode_responses=True,
            )
            _clients[url] = client
    return client


def _prefix() -> str:
    config = settings.CHANNEL_LAYERS.get("default", {}).get("CONFIG", {})
    return f"{config.get('prefix', 'sparkpanel')}:live"


def next_version() -> int:
    """A version newer than every one taken before (also across Redis restarts)."""
    try:
        return int(_redis().eval(_NEXT_VERSION, 1, f"{_prefix()}:seq"))
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from exc


# --- the live elements ------------------------------------------------------------------


@dataclass(frozen=True)
class Element:
    """One kind of live element: its DOM id and its template for a key (an object's id or
    a host's name), how to load its context, and whether it is personal (rendered per
    user: never pushed, fetched by each page)."""

    dom_id: Callable[[str], str]
    template: str
    load: Callable[[str, object], dict]  # (key, request or None) -> template context
    personal: bool = False


def _run(key: str):
    from apps.runs.models import Run

    try:
        return Run.objects.select_related("recipe", "host", "started_by").get(pk=int(key))
    except (ValueError, Run.DoesNotExist):
        raise Http404("no such run") from None


def _job(key: str):
    from apps.benchmarks.models import Job

    try:
        return Job.objects.select_related("recipe", "host", "suite", "queued_by", "run").get(
            pk=int(key)
        )
    except (ValueError, Job.DoesNotExist):
        raise Http404("no such benchmark job") from None


def _host(key: str):
    from apps.hosts.models import Host

    try:
        return Host.objects.get(name=key)
    except Host.DoesNotExist:
        raise Http404("no such host") from None


def current_notices(limit: int = 5) -> list:
    """The notices every page shows: unexpired ones (Notice.objects.current() where the
    model has expiry), newest first."""
    from apps.core.models import Notice

    current = getattr(Notice.objects, "current", None)
    qs = current() if callable(current) else Notice.objects.all()
    return list(qs.select_related("author").order_by("-created_at", "-pk")[:limit])


def notices_context() -> dict:
    """The current notices and when the first of them expires (the page fetches its
    notices again then: an expired notice leaves open pages too)."""
    notices = current_notices()
    expiries = [n.expires_at for n in notices if getattr(n, "expires_at", None)]
    return {"notices": notices, "next_expiry": min(expiries) if expiries else None}


def guard_banners() -> list[dict]:
    """The guard's current banner per host ({host, level, message, at}), newest first;
    "back to normal" ones only for OK_BANNER_S. Raises LiveUnavailable."""
    try:
        raw = _redis().hgetall(f"{_prefix()}:banners")
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from exc
    from apps.hosts.models import Host

    now = timezone.now().timestamp()
    banners = []
    hosts = set(Host.objects.filter(name__in=list(raw)).values_list("name", flat=True))
    for host, value in raw.items():
        if host not in hosts:
            continue  # the host was removed: its guard says nothing any more
        try:
            banner = json.loads(value)
            at = float(banner["at"])
        except (ValueError, KeyError, TypeError):
            continue
        if banner.get("level") == "ok" and now - at > OK_BANNER_S:
            continue
        banners.append(
            {
                "host": host,
                "level": banner.get("level", "warn"),
                "message": banner.get("message", ""),
                "at": datetime.fromtimestamp(at, tz=UTC),
            }
        )
    banners.sort(key=lambda b: b["at"], reverse=True)
    return banners


def _run_log_context(key: str, request) -> dict:
    from apps.runs.views import _log_tail

    run = _run(key)
    return {"run": run, "log_tail": _log_tail(run)}


def _job_progress_context(key: str, request) -> dict:
    from apps.benchmarks.services import queue_entry

    job = _job(key)
    return {"job": job, "entry": queue_entry(job)}


def _job_results_context(key: str, request) -> dict:
    from apps.benchmarks.views import job_context

    return job_context(_job(key))


def _job_actions_context(key: str, request) -> dict:
    from apps.benchmarks.services import can_cancel

    job = _job(key)
    return {"job": job, "can_cancel": request is not None and can_cancel(job, request.user)}


def _host_line_context(key: str, request) -> dict:
    from apps.runs.models import Run

    host = _host(key)
    active = Run.objects.active().filter(host=host).select_related("recipe").first()
    return {"host": host, "active": active}


def _queue_host_context(key: str, request) -> dict:
    from apps.benchmarks.services import host_queue_entries

    host = _host(key)
    return {"host": host, "entries": host_queue_entries(host)}


def _banners_context(key: str, request) -> dict:
    return {"banners": guard_banners()}


ELEMENTS: dict[str, Element] = {
    "run-progress": Element(
        lambda k: f"run-{k}-progress", "runs/partials/progress.html",
        lambda k, r: {"run": _run(k)},
    ),
    "run-details": Element(
        lambda k: f"run-{k}-details", "runs/partials/details.html",
        lambda k, r: {"run": _run(k)},
    ),
    "run-log": Element(lambda k: f"run-{k}-log", "runs/partials/log.html", _run_log_context),
    "run-actions": Element(
        lambda k: f"run-{k}-actions", "runs/partials/actions.html",
        lambda k, r: {"run": _run(k)}, personal=True,
    ),
    "job-progress": Element(
        lambda k: f"job-{k}-progress", "benchmarks/partials/job_progress.html",
        _job_progress_context,
    ),
    "job-results": Element(
        lambda k: f"job-{k}-results", "benchmarks/partials/job_results.html",
        _job_results_context,
    ),
    "job-actions": Element(
        lambda k: f"job-{k}-actions", "benchmarks/partials/job_actions.html",
        _job_actions_context, personal=True,
    ),
    "host-line": Element(
        lambda k: f"host-{k}-line", "core/partials/host_line.html", _host_line_context
    ),
    "queue-host": Element(
        lambda k: f"queue-{k}", "benchmarks/partials/queue_host.html", _queue_host_context,
        personal=True,
    ),
    "notices": Element(
        lambda k: "notices-strip", "core/partials/notices_strip.html",
        lambda k, r: notices_context(),
    ),
    "notice-list": Element(
        lambda k: "notices", "core/partials/notice_list.html",
        lambda k, r: notices_context(), personal=True,
    ),
    "banners": Element(lambda k: "banners", "core/partials/banners.html", _banners_context),
}  # fmt: skip


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


def push_run(run_id: int, *, lines: list[str] | None = None, actions: bool = True) -> int | None:
    """A run's progress, details and (unless `actions` is False: its buttons only change
    with its state) actions; `lines` (new log lines) are appended to its log on every open
    page whose log is older than this version."""
    key = str(run_id)
    extra = ""
    if lines:
        extra = render_to_string("runs/partials/log_lines.html", {"run": {"pk": run_id},
                                                                    "lines": lines})  # fmt: skip
    elements = [("run-progress", key), ("run-details", key)]
    if actions:
        elements.append(("run-actions", key))
    return push(elements, extra_html=extra)


def push_job(job_id: int, *, results: bool = False, personal: bool = True) -> int | None:
    """A benchmark job's status (and its results, after a level) and, unless `personal`
    is False (progress ticks: they change neither), its Cancel button and its host's
    queue, which each open page fetches for its own user."""
    from apps.benchmarks.models import Job

    key = str(job_id)
    elements = [("job-progress", key)]
    if results:
        elements.append(("job-results", key))
    if personal:
        elements.append(("job-actions", key))
        host = Job.objects.filter(pk=job_id).values_list("host__name", flat=True).first()
        if host:
            elements.append(("queue-host", host))
    return push(elements)


def push_host(host_name: str) -> int | None:
    """A host's line on the dashboard and its section of the benchmark queue page."""
    return push([("host-line", host_name), ("queue-host", host_name)])


def push_banners() -> int | None:
    return push([("banners", "")])


def push_notices() -> int | None:
    """The notices strip of every page and the dashboard's list (personal: its Delete)."""
    return push([("notices", ""), ("notice-list", "")])


def set_banner(host_name: str, level: str, message: str) -> int | None:
    """The guard's banner for a host (replaces the host's previous one) and push it."""
    value = json.dumps({"level": level, "message": message, "at": timezone.now().timestamp()})
    try:
        _redis().hset(f"{_prefix()}:banners", host_name, value)
    except redis.RedisError:
        log.warning("could not store the guard's banner for %s", host_name, exc_info=True)
        return None
    return push_banners()


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
