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


@register.filter
def sim_label(obj) -> str:
    """A "simulated ×10" tag after a figure in a simulated host's time (a run, host, benchmark
    job, chat message or HostClock; apps/hosts/clock.py); nothing on a real host."""
    from django.utils.html import format_html

    from apps.hosts.clock import context_clock

    clock = context_clock(obj)
    if not clock.simulated:
        return ""
    return format_html(
        ' <span class="tag sim-label" title="{}">{}</span>',
        f"In the simulated Spark's time: sparksim runs {clock.scale:g}× faster than the wall "
        "clock, and the panel shows what a real Spark would measure.",
        clock.label,
    )


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
