"""What an open page receives over /ws/events/: the panel's real ASGI application, a
signed-in member's session, the versioned pushes gathered while an action runs."""

from __future__ import annotations

import json

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client


def session_for(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def pushes(user, act, until, timeout: float = 10.0) -> list[dict]:
    """Open `user`'s socket, do `act()`, and gather versioned pushes until `until(msgs)`."""
    from sparkpanel.asgi import application

    session = session_for(user)

    async def run():
        communicator = WebsocketCommunicator(
            application, "/ws/events/",
            headers=[(b"host", b"localhost"), (b"origin", b"http://localhost"),
                     (b"cookie", f"sessionid={session}".encode())],
        )  # fmt: skip
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        messages: list[dict] = []
        try:
            await database_sync_to_async(act)()
            while not until(messages):
                raw = await communicator.receive_from(timeout=timeout)
                if raw.startswith("{"):
                    messages.append(json.loads(raw))
        finally:
            await communicator.disconnect()
        return messages

    return async_to_sync(run)()
