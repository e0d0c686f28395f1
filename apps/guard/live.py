"""The guard's banners: one per host ("MemAvailable … is below the warn threshold", a run
stopped by the watchdog, "back to normal" for ten minutes), set by the host agent and shown
on every page (templates/_base.html through apps/guard/templatetags/banner_tags.py). They are
kept in Redis next to the live versions (apps/core/live.py), so every process sees them."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from django.utils import timezone

from apps.core import live
from apps.core.live import Element, LiveUnavailable
from apps.hosts.models import Host

log = logging.getLogger(__name__)

BANNERS = "banners"  # the Redis hash: host name -> {level, message, at}
# Banners of a guard that said "back to normal" are shown this long, then dropped.
OK_BANNER_S = 600


def guard_banners() -> list[dict]:
    """The guard's current banner per host ({host, level, message, at}), newest first;
    "back to normal" ones only for OK_BANNER_S. Raises LiveUnavailable."""
    raw = live.shared_hash(BANNERS)
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


live.register("banners", Element(lambda k: "banners", "core/partials/banners.html",
                                 lambda k, r: {"banners": guard_banners()}))  # fmt: skip


def push_banners() -> int | None:
    return live.push([("banners", "")])


def set_banner(host_name: str, level: str, message: str) -> int | None:
    """The guard's banner for a host (replaces the host's previous one) and push it."""
    value = json.dumps({"level": level, "message": message, "at": timezone.now().timestamp()})
    try:
        live.shared_hash_set(BANNERS, host_name, value)
    except LiveUnavailable:
        log.warning("could not store the guard's banner for %s", host_name, exc_info=True)
        return None
    return push_banners()
