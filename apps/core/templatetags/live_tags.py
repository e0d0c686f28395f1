"""The live elements every page carries (templates/_base.html): the guard's banners and the
team notices strip, rendered from current state (apps/core/live.py)."""

from django import template

register = template.Library()


@register.inclusion_tag("core/partials/banners.html")
def live_banners() -> dict:
    from apps.core.live import LiveUnavailable, guard_banners

    try:
        return {"banners": guard_banners()}
    except LiveUnavailable:  # Redis down: the page still renders; the badge says "offline"
        return {"banners": []}


@register.inclusion_tag("core/partials/notices_strip.html")
def live_notices() -> dict:
    from apps.core.live import notices_context

    return notices_context()
