"""The profile page's sections: the accounts app owns the page (/accounts/profile/), and
apps above it add their own cards without the accounts app knowing them.

An app registers a `Section` in its `AppConfig.ready()`: a template (included in the page,
in `order`), a function of the request that returns the template's context, and, for at most
one section, `post`: the view that answers a POST to the page itself (the API's token form).
Its own views re-render the whole page with `render_profile(request, status, **extra)`
for a form with its errors; `extra` goes over the sections' context. A create that worked
answers `redirect_showing_once(request, anchor, **extra)` instead (post/redirect/get): a
reload of the page then repeats a GET, never the POST, and a new secret is shown once.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

TEMPLATE = "accounts/profile.html"
# The session key that holds what the page shows once (new secrets), one entry per create.
SHOWN_ONCE = "profile_shown_once"
# Entries kept while their page has not been loaded (a redirect never followed): the newest.
SHOWN_ONCE_KEEP = 8


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


def redirect_showing_once(request: HttpRequest, anchor: str, **extra) -> HttpResponse:
    """After a create: to the profile page's section `anchor`, whose GET shows `extra` (JSON
    values: a new token, key or webhook secret) once. `extra` waits in the session (kept on
    the server), never in the URL, where history and access logs would keep it: the URL
    names only its entry (`?shown=`, meaningless outside this session). One entry per
    create, so two creates in two tabs before either page loads each show their own secret;
    with one slot, the second overwrote the first, which was never shown."""
    once = secrets.token_urlsafe(9)
    pending = {**request.session.get(SHOWN_ONCE, {}), once: extra}
    request.session[SHOWN_ONCE] = dict(list(pending.items())[-SHOWN_ONCE_KEEP:])
    return HttpResponseRedirect(f"{reverse('profile')}?{urlencode({'shown': once})}#{anchor}")


def take_shown_once(request: HttpRequest) -> dict:
    """The entry this GET names (see `redirect_showing_once`), gone from the session; {}
    when it names none, or one already shown (a reload)."""
    pending = dict(request.session.get(SHOWN_ONCE, {}))
    extra = pending.pop(request.GET.get("shown", ""), None)
    if extra is None:
        return {}
    if pending:
        request.session[SHOWN_ONCE] = pending
    else:
        del request.session[SHOWN_ONCE]
    return extra if isinstance(extra, dict) else {}
