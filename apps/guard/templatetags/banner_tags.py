"""The guard's banners every page carries (templates/_base.html), rendered from current
state (apps/guard/live.py)."""

from django import template

from apps.core.live import LiveUnavailable
from apps.guard.live import guard_banners

register = template.Library()


@register.inclusion_tag("core/partials/banners.html")
def live_banners() -> dict:
    try:
        return {"banners": guard_banners()}
    except LiveUnavailable:  # Redis down: the page still renders; the badge says "offline"
        return {"banners": []}
