"""Template filters every page can use (registered as builtins in settings). The hosts'
`sim_label` filter is in apps/hosts/templatetags/hosts_tags.py (`{% load hosts_tags %}`)."""

from django import template

from sparkdomain.command import shell_lines

register = template.Library()


@register.filter
def command_lines(argv) -> str:
    """A command's argument vector as copy-pasteable shell, one option per line."""
    if not isinstance(argv, list | tuple) or not all(isinstance(a, str) for a in argv):
        return ""
    return shell_lines(list(argv))


@register.filter
def grouped(value) -> str:
    """8749963 → "8,749,963": every count the pages show, in one format. A float keeps
    its decimals (1068.5 → "1,068.5"); anything else is shown as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


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


@register.filter
def bytes_gb(value) -> str:
    """Bytes for people, in decimal units as disks and the hub count them: 71.2 GB, 12.5 MB."""
    try:
        n = float(value)
    except (TypeError, ValueError):
        return ""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


@register.filter
def ratio_pct(done, total) -> float:
    """done / total as a percentage (0 when there is no total)."""
    try:
        return 100.0 * float(done) / float(total) if float(total) else 0.0
    except (TypeError, ValueError):
        return 0.0
