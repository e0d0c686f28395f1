"""The profile page's sections: the accounts app owns the page (/accounts/profile/), and
apps above it add their own cards without the accounts app knowing them.

An app registers a `Section` in its `AppConfig.ready()`: a template (included in the page,
in `order`), a function of the request that returns the template's context, and, for at most
one section, `post`: the view that answers a POST to the page itself (the API's token form).
Its own views re-render the whole page with `render_profile(request, status, **extra)`,
e.g. a form with its errors or a secret shown once; `extra` goes over the sections' context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

TEMPLATE = "accounts/profile.html"


@dataclass(frozen=True)
class Section:
    name: str  # unique; registering the same name again replaces the section
    template: str
    context: Callable[[HttpRequest], Mapping[str, object]]
    order: int = 100  # smaller first; the accounts app's own card is 0
    post: Callable[[HttpRequest], HttpResponse] | None = None


_sections: dict[str, Section] = {}


def register(section: Section) -> None:
    """Add (or replace, by name) a section of the profile page."""
    if section.post is not None:
        for other in _sections.values():
            if other.post is not None and other.name != section.name:
                raise ImproperlyConfigured(
                    f"profile section {section.name!r}: {other.name!r} already answers the "
                    "profile page's POST"
                )
    _sections[section.name] = section


def sections() -> list[Section]:
    """The registered sections, in page order."""
    return sorted(_sections.values(), key=lambda s: (s.order, s.name))


def post_handler() -> Callable[[HttpRequest], HttpResponse] | None:
    """The view that answers a POST to the profile page, if a section registered one."""
    return next((s.post for s in sections() if s.post is not None), None)


def render_profile(request: HttpRequest, status: int = 200, **extra) -> HttpResponse:
    """The whole page: every section's context, then `extra` over it."""
    shown = sections()
    context: dict[str, object] = {"current": "profile"}
    for section in shown:
        context.update(section.context(request))
    context.update(extra)
    context["profile_sections"] = shown
    return render(request, TEMPLATE, context, status=status)
