"""`{% term "word" %}`: a results-page word with its definition (apps/benchmarks/terms.py).

    {% load bench_terms %}
    {% term "saturated" %}                       the word itself
    {% term "implausible" "⚠ implausible" %}     another label for the same definition
    {% term "saturated" cls="bad-text" %}        extra classes

Renders `<abbr class="term" title="definition" tabindex="0" aria-describedby="term-…">`:
the definition shows on hover, the element takes keyboard focus, and assistive technology
reads the matching entry of the page's definitions list (`{% term_definitions %}`).
"""

from __future__ import annotations

from django import template
from django.template.loader import render_to_string
from django.utils.html import format_html

from apps.benchmarks import terms

register = template.Library()


@register.simple_tag
def term(word: str, label: str | None = None, cls: str = "") -> str:
    entry = terms.get(word)
    return format_html(
        '<abbr class="term{}" title="{}" tabindex="0" data-term="{}" aria-describedby="{}">'
        "{}</abbr>",
        f" {cls}" if cls else "",
        entry.definition,
        entry.word,
        entry.slug,
        entry.word if label is None else label,
    )


@register.simple_tag
def term_definitions() -> str:
    """The definitions list: every term, in terms.py's order."""
    return render_to_string("benchmarks/partials/term_list.html", {"terms": terms.TERMS})


@register.filter
def pct(value) -> str:
    """A 0–1 fraction as a percentage ("12.3 %"); "—" when unknown."""
    try:
        return f"{float(value) * 100:.1f} %"
    except (TypeError, ValueError):
        return "—"
