"""Every WebSocket route refuses anonymous sockets, accounts without a role and foreign
Origins; the chat socket also refuses a conversation that is not the caller's.

The routes are read from sparkpanel/routing.py, so a new socket is checked the day it is
added. Each route is also opened once by a member, so a refusal is known to come from the
check, not from a wrong path.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from apps.accounts.roles import Role
from apps.accounts.services import user_create
from apps.chat.models import Conversation
from apps.core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from sparkpanel.asgi import application
from sparkpanel.edge import CLOSE_NO_ROUTE
from sparkpanel.routing import websocket_urlpatterns
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

MIN_ROUTES = 4
_PARAM = re.compile(r"<(?:[^>:]+:)?([^>]+)>")


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _headers(session: str | None = None, origin: str | None = "http://localhost"):
    headers = [(b"host", b"localhost")]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if session:
        headers.append((b"cookie", f"sessionid={session}".encode()))
    return headers


def _connect_all(attempts: list[tuple[str, list]]) -> list[tuple[bool, int | None]]:
    """Open each (path, headers) socket and close it again; (accepted, close code)."""

    async def run():
        results, opened = [], []
        for path, headers in attempts:
            communicator = WebsocketCommunicator(application, path, headers=headers)
            connected, code = await communicator.connect(timeout=5)
            opened.append(communicator)
            results.append((connected, code if not connected else None))
        # A refused socket's consumer may take its whole second to wind down: in parallel.
        await asyncio.gather(*(c.disconnect() for c in opened))
        return results

    return async_to_sync(run)()


def _paths(objects: dict) -> list[str]:
    assert len(websocket_urlpatterns) >= MIN_ROUTES, "the socket walk found too few routes"
    values = {"host": objects["host"].name, "run": objects["run"].pk, "pk": objects["chat"].pk}
    paths = []
    for pattern in websocket_urlpatterns:
        route = str(pattern.pattern)
        params = _PARAM.findall(route)
        unknown = [p for p in params if p not in values]
        assert not unknown, f"no value for {unknown} in /{route}: add one to this test"
        paths.append("/" + _PARAM.sub(lambda m: str(values[m[1]]), route))
    return paths


def test_every_socket_refuses_the_anonymous_the_roleless_and_foreign_origins(
    world, member, outsider
):
    chat = Conversation.objects.create(user=member, run=world["run"], recipe=world["recipe"])
    paths = _paths({**world, "chat": chat})
    mine, nobody = _session(member), _session(outsider)
    cases = {
        "member (control)": (_headers(mine), True, None),
        "anonymous": (_headers(), False, CLOSE_UNAUTHENTICATED),
        "no role": (_headers(nobody), False, CLOSE_FORBIDDEN),
        "foreign origin": (_headers(mine, origin="http://evil.example"), False, None),
        "look-alike origin": (_headers(mine, origin="http://localhost.evil.example"), False, None),
        # The panel's host on another port (a notebook on the same Spark) or scheme: the full
        # origin must match, as Django's CSRF check demands for HTTP.
        "same host, other port": (_headers(mine, origin="http://localhost:9999"), False, None),
        "same host, other scheme": (_headers(mine, origin="https://localhost"), False, None),
        "no origin": (_headers(mine, origin=None), False, None),
    }
    attempts = [(path, headers) for path in paths for headers, _, _ in cases.values()]
    results = iter(_connect_all(attempts))
    problems = []
    for path in paths:
        for name, (_, accepted, code) in cases.items():
            connected, closed_with = next(results)
            if connected != accepted or (code is not None and closed_with != code):
                problems.append(f"{path} {name}: accepted={connected} code={closed_with}")
    assert not problems, "\n".join(problems)


def test_chat_refuses_another_members_conversation(world, member):
    other, _ = user_create(username="max-member", role=Role.MEMBER, password=PASSWORD)
    theirs = Conversation.objects.create(user=other, run=world["run"], recipe=world["recipe"])
    mine = Conversation.objects.create(user=member, run=world["run"], recipe=world["recipe"])
    session = _session(member)
    [(own, _), (foreign, code)] = _connect_all(
        [(f"/ws/chat/{mine.pk}/", _headers(session)), (f"/ws/chat/{theirs.pk}/", _headers(session))]
    )
    assert own
    assert not foreign and code == CLOSE_FORBIDDEN


def test_a_trusted_origin_is_accepted_and_only_with_its_scheme_and_port(world, member, settings):
    """CSRF_TRUSTED_ORIGINS (a panel behind a proxy on another name) opens sockets too,
    compared in full, wildcard subdomains as Django's CSRF check reads them."""
    settings.CSRF_TRUSTED_ORIGINS = ["https://panel.example:8443", "https://*.lab.example"]
    session = _session(member)
    origins = {
        "https://panel.example:8443": True,
        "https://spark1.lab.example": True,
        "http://panel.example:8443": False,
        "https://panel.example": False,
        "https://panel.example:8444": False,
        "http://spark1.lab.example": False,
    }
    results = _connect_all([("/ws/events/", _headers(session, origin=o)) for o in origins])
    got = {origin: connected for origin, (connected, _) in zip(origins, results, strict=True)}
    assert got == origins


def test_a_host_outside_allowed_hosts_is_refused_even_with_a_matching_origin(member):
    """DNS rebinding: a page on evil.example that resolves to the panel sends Host and
    Origin of its own; the Host is not an allowed host, so the origin is not the panel's."""
    session = _session(member)
    headers = [(b"host", b"evil.example"), (b"origin", b"http://evil.example"),
               (b"cookie", f"sessionid={session}".encode())]  # fmt: skip
    [(connected, _)] = _connect_all([("/ws/events/", headers)])
    assert not connected


def test_an_unknown_socket_path_is_closed_with_4404_and_one_log_line(member, caplog):
    session = _session(member)
    with caplog.at_level("WARNING"):
        paths = ["/ws/nope/", "/ws/events/extra/", "/elsewhere"]
        results = _connect_all([(path, _headers(session)) for path in paths])
    assert results == [(False, CLOSE_NO_ROUTE)] * 3
    lines = [r for r in caplog.records if "no such socket" in r.getMessage()]
    assert len(lines) == 3
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
