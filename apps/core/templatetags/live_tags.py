"""The team notices strip every page carries (templates/_base.html), rendered from current
state (apps/core/live.py). The guard's banners: apps/guard/templatetags/banner_tags.py."""

from django import template

from apps.core.live import notices_context

register = template.Library()


@register.inclusion_tag("core/partials/notices_strip.html")
def live_notices() -> dict:
    return notices_context()
