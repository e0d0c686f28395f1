from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from apps.accounts.roles import VIEW_PANEL
from apps.core.events import BROADCAST_GROUP, user_group

# Close codes in the 4000 range are ours; browsers see them in CloseEvent.code.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


async def authorise(consumer: AsyncWebsocketConsumer, permission: str):
    """The user of a socket that may use `permission`, else None after closing it: 4401
    when anonymous, 4403 without the capability. Every consumer starts with this."""
    user = consumer.scope.get("user")
    if user is None or not user.is_authenticated:
        await consumer.close(code=CLOSE_UNAUTHENTICATED)
        return None
    if not await database_sync_to_async(user.has_perm)(permission):
        await consumer.close(code=CLOSE_FORBIDDEN)
        return None
    return user


class EventsConsumer(AsyncWebsocketConsumer):
    """The browser's live channel: pushed HTML fragments for every page.

    Anonymous sockets and accounts without a role are refused; foreign Origins never
    get here (AllowedHostsOriginValidator in asgi.py).
    """

    groups_joined: list[str]

    async def connect(self) -> None:
        self.groups_joined = []
        user = await authorise(self, VIEW_PANEL)
        if user is None:
            return
        for group in (BROADCAST_GROUP, user_group(user.pk)):
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups_joined.append(group)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        # The channel is push-only for now; a client message is ignored, never echoed.
        return

    async def fragment_push(self, event: dict) -> None:
        await self.send(text_data=event["html"])

    async def live_push(self, event: dict) -> None:
        """A versioned push of live elements (apps/core/live.py): the page applies it only
        over older versions, and fetches its own copy of each personal element in
        `changed`."""
        message = {"seq": event["seq"], "html": event.get("html", "")}
        if event.get("changed"):
            message["changed"] = event["changed"]
        await self.send(text_data=json.dumps(message))
