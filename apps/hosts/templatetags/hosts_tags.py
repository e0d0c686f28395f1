"""Template filters about hosts: `{% load hosts_tags %}`, then `{{ run|sim_label }}`."""

from django import template
from django.utils.html import format_html

from apps.hosts.clock import context_clock

register = template.Library()


@register.filter
def sim_label(obj) -> str:
    """A "simulated ×10" tag after a figure in a simulated host's time (a run, host, benchmark
    job, chat message or HostClock; apps/hosts/clock.py); nothing on a real host."""
    clock = context_clock(obj)
    if not clock.simulated:
        return ""
    return format_html(
        ' <span class="tag sim-label" title="{}">{}</span>',
        f"In the simulated Spark's time: sparksim runs {clock.scale:g}× faster than the wall "
        "clock, and the panel shows what a real Spark would measure.",
        clock.label,
    )
