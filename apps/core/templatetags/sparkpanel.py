"""Template filters every page can use (registered as builtins in settings). The hosts'
`sim_label` filter is in apps/hosts/templatetags/hosts_tags.py (`{% load hosts_tags %}`)."""

from django import template

register = template.Library()


@register.filter
def duration(seconds) -> str:
    """12 s, 4:05, 1 h 02 min — how long, for people."""
    try:
        total = round(float(seconds))
    except (TypeError, ValueError):
        return ""
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60}:{total % 60:02d}"
    return f"{total // 3600} h {total % 3600 // 60:02d} min"


@register.filter
def split(value, sep: str = " ") -> list[str]:
    """ "a b c"|split → ["a", "b", "c"] (for lists written in templates)."""
    return [part for part in str(value).split(sep) if part]


@register.filter
def pct(value) -> int:
    """A percentage as a whole number 0–100, for the `pct-N` width classes of sparkpanel.css
    (bars and gauges without style attributes: the Content-Security-Policy allows none)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    if number != number:  # NaN
        return 0
    return max(0, min(100, round(number)))
