"""The /ws/events/ socket: who may connect, and fragments pushed through real Redis."""

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.core.consumers import CLOSE_FORBIDDEN
from apps.core.events import BROADCAST_GROUP, fragment_push, user_group
from sparkpanel.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


def _headers(origin: str | None = "http://localhost", session: str | None = None):
    headers = [(b"host", b"localhost")]
    if origin:
        headers.append((b"origin", origin.encode()))
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    return headers


def _session_for(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _connect(headers):
    async def run():
        communicator = WebsocketCommunicator(application, "/ws/events/", headers=headers)
        connected, code = await communicator.connect(timeout=5)
        await communicator.disconnect()
        return connected, code

    return async_to_sync(run)()


def test_anonymous_socket_is_refused():
    connected, _ = _connect(_headers())
    assert not connected


def test_foreign_origin_is_refused_even_with_a_valid_session(member):
    connected, _ = _connect(_headers(origin="http://evil.example", session=_session_for(member)))
    assert not connected


def test_account_without_role_is_refused(outsider):
    connected, code = _connect(_headers(session=_session_for(outsider)))
    assert not connected
    assert code == CLOSE_FORBIDDEN


def test_member_connects_and_receives_fragments_for_everyone_and_for_them_only(member, operator):
    member_session = _session_for(member)

    async def run():
        communicator = WebsocketCommunicator(
            application, "/ws/events/", headers=_headers(session=member_session)
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        try:
            layer = get_channel_layer()
            await layer.group_send(
                BROADCAST_GROUP, {"type": "fragment.push", "html": '<p id="x">all</p>'}
            )
            assert await communicator.receive_from(timeout=5) == '<p id="x">all</p>'
            await layer.group_send(
                user_group(operator.pk), {"type": "fragment.push", "html": "<p>not yours</p>"}
            )
            await layer.group_send(
                user_group(member.pk), {"type": "fragment.push", "html": '<p id="y">yours</p>'}
            )
            assert await communicator.receive_from(timeout=5) == '<p id="y">yours</p>'
            assert await communicator.receive_nothing(timeout=0.3)
        finally:
            await communicator.disconnect()

    async_to_sync(run)()


def test_fragment_push_from_sync_code_reports_success(member):
    # The sync helper used by services and tasks goes through the real Redis layer.
    assert fragment_push(group=BROADCAST_GROUP, html="<p>ok</p>") is True


def test_an_idle_socket_outlives_the_redis_client_socket_timeout(member):
    """An idle page must stay connected (redis-py 8's 5 s socket timeout once killed it)."""
    import asyncio

    session = _session_for(member)

    async def run():
        communicator = WebsocketCommunicator(
            application, "/ws/events/", headers=_headers(session=session)
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        try:
            await asyncio.sleep(6.5)
            await get_channel_layer().group_send(
                BROADCAST_GROUP, {"type": "fragment.push", "html": "<p>still here</p>"}
            )
            assert await communicator.receive_from(timeout=5) == "<p>still here</p>"
        finally:
            await communicator.disconnect()

    async_to_sync(run)()
