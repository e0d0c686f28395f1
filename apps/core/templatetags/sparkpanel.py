"""Template filters every page can use (registered as builtins in settings)."""

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
