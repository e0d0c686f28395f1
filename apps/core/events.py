"""Pushing HTML fragments to browsers over /ws/events/.

Every connected browser is in the group `events`; later capabilities add their own
groups (`run-<pk>`, `host-<name>`). A fragment is HTML whose root element has an id:
the browser replaces the element with that id, or, when the root carries
`data-swap="afterbegin:<id>"` (or `beforeend:<id>`), inserts it into that container.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

BROADCAST_GROUP = "events"
FRAGMENT_EVENT = "fragment.push"


def user_group(user_id: int) -> str:
    return f"user-{user_id}"


def fragment_message(html: str) -> dict:
    return {"type": FRAGMENT_EVENT, "html": html}


async def fragment_push_async(*, group: str, html: str) -> None:
    await get_channel_layer().group_send(group, fragment_message(html))


def fragment_push(*, group: str, html: str) -> bool:
    """Send a fragment to a group from sync code; returns False (and logs) if Redis is down.

    A push is best effort: the page also shows the truth on reload, so a lost push must
    never fail the request or task that made it.
    """
    try:
        async_to_sync(fragment_push_async)(group=group, html=html)
    except Exception:  # redis down, network error: degrade, do not fail the caller
        log.warning("could not push a fragment to group %s", group, exc_info=True)
        return False
    return True
