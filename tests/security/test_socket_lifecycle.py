"""Open sockets follow the account, and leave no traceback and no group member behind.

Through a real uvicorn (in a thread of this process, the production ASGI application) and
the real Redis channel layer, with real WebSocket clients:

- every route of sparkpanel/routing.py is a PanelSocket (so a new route gets all this);
- signing out closes that browser session's sockets on every route with 4401, while the
  same user's other session and another user's sockets stay open;
- deactivating the account or changing its password closes all of its sockets (4401);
  losing the role closes them with 4403, a promotion leaves them open;
- live sockets re-join their groups before `group_expiry` drops them, and the periodic
  re-check also closes a socket whose account was changed without any signal;
- 200 sockets closed at once log no traceback and leave no member in any group zset;
- a chat answer streaming when its session signs out is stopped upstream and kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest
import redis
import uvicorn
from channels.layers import channel_layers, get_channel_layer
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from websockets.asyncio.client import connect as aconnect
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from apps.accounts.roles import Role
from apps.accounts.services import user_create, user_set_role
from apps.chat.models import Conversation, Message
from apps.core.consumers import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, PanelSocket
from apps.core.events import fragment_push, user_group
from sparkpanel.routing import websocket_urlpatterns
from tests.chat.conftest import chat_server, conversation_for  # noqa: F401 (fixtures used)
from tests.conftest import PASSWORD, free_port, run_async, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]

MANY = 200


class Server:
    """uvicorn serving sparkpanel.asgi in a thread, on a free loopback port."""

    def __init__(self) -> None:
        from sparkpanel.asgi import application

        self.port = free_port()
        config = uvicorn.Config(
            application, host="127.0.0.1", port=self.port, log_config=None, lifespan="off",
            # A socket a test leaves open must not hold the shutdown up (the default waits
            # for it: 30 s of teardown per test).
            timeout_graceful_shutdown=1,
            proxy_headers=False,  # no proxy in front: as make run without FORWARDED_ALLOW_IPS
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> Server:
        self.thread.start()
        wait_for(lambda: self.server.started, 20, "uvicorn")
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def fresh_layer():
    """A channel layer built from the current settings (the test may change them)."""
    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture
def server(fresh_layer):
    with Server() as running:
        yield running


def _session(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _open(server: Server, path: str, client: Client):
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    connector = connect(
        server.url(path),
        origin=server.origin,
        additional_headers={"Cookie": cookie},
        open_timeout=15,
        close_timeout=5,
    )
    return connector.__enter__()  # the connection; each test closes its own (_close)


def _paths(world: dict, conversation: Conversation) -> list[str]:
    values = {"host": world["host"].name, "run": world["run"].pk, "pk": conversation.pk}
    paths = []
    for pattern in websocket_urlpatterns:
        route = str(pattern.pattern)
        for name, value in values.items():
            route = route.replace(f"<int:{name}>", str(value)).replace(f"<str:{name}>", str(value))
        assert "<" not in route, f"no value for /{route}: add one to this test"
        paths.append("/" + route)
    return paths


def _closed_with(ws, timeout: float = 20) -> int | None:
    """The close code the server sent within `timeout` (pushes before it are skipped);
    None when the socket is still open then."""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            ws.recv(timeout=left)
    except TimeoutError:
        return None
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd else -1
    return None


def _still_open(ws) -> bool:
    try:
        ws.recv(timeout=0.2)  # a push is fine; a close is not
    except TimeoutError:
        pass
    except ConnectionClosed:
        return False
    try:
        return ws.ping().wait(10)
    except ConnectionClosed:
        return False


@pytest.fixture
def people(world, member):
    """The member's sockets on every route from one browser, one from a second browser of
    the member, and sockets of another member, who must never be affected."""
    other, _ = user_create(username="max-member", role=Role.MEMBER, password=PASSWORD)
    mine = Conversation.objects.create(user=member, run=world["run"], recipe=world["recipe"])
    theirs = Conversation.objects.create(user=other, run=world["run"], recipe=world["recipe"])
    return {
        "member": member,
        "other": other,
        "browser": _session(member),
        "second_browser": _session(member),
        "other_browser": _session(other),
        "paths": _paths(world, mine),
        "other_paths": _paths(world, theirs),
    }


def _open_all(server, people):
    subject = [_open(server, p, people["browser"]) for p in people["paths"]]
    second = [_open(server, "/ws/events/", people["second_browser"])]
    bystanders = [_open(server, p, people["other_browser"]) for p in people["other_paths"]]
    return subject, second, bystanders


def _verdicts(sockets, paths, expected) -> list[str]:
    problems = []
    for ws, path in zip(sockets, paths, strict=True):
        code = _closed_with(ws)
        if code != expected:
            problems.append(f"{path}: closed with {code}, expected {expected}")
    return problems


def _bystanders_open(sockets, paths) -> list[str]:
    pairs = zip(sockets, paths, strict=True)
    return [f"{p}: closed, should be open" for ws, p in pairs if not _still_open(ws)]


def _close(*groups) -> None:
    for group in groups:
        for ws in group:
            ws.close()


def test_every_route_is_a_panel_socket():
    for pattern in websocket_urlpatterns:
        consumer = pattern.callback.consumer_class
        assert issubclass(consumer, PanelSocket), f"/{pattern.pattern} is a {consumer}"


def test_signing_out_closes_that_sessions_sockets_and_no_other(server, people):
    subject, second, bystanders = _open_all(server, people)
    try:
        response = people["browser"].post(reverse("logout"))
        assert response.status_code in (200, 302)
        problems = _verdicts(subject, people["paths"], CLOSE_UNAUTHENTICATED)
        problems += _bystanders_open(second, ["/ws/events/ (the member's second browser)"])
        problems += _bystanders_open(bystanders, people["other_paths"])
        assert not problems, "\n".join(problems)
    finally:
        _close(subject, second, bystanders)


@pytest.mark.parametrize("change", ["deactivate", "password"])
def test_deactivation_or_a_new_password_closes_every_socket_of_the_account(server, people, change):
    subject, second, bystanders = _open_all(server, people)
    try:
        member = get_user_model().objects.get(pk=people["member"].pk)
        if change == "deactivate":
            member.is_active = False
        else:
            member.set_password(PASSWORD + "-new")
        member.save()
        problems = _verdicts(
            subject + second, people["paths"] + ["/ws/events/ (second)"], CLOSE_UNAUTHENTICATED
        )
        problems += _bystanders_open(bystanders, people["other_paths"])
        assert not problems, "\n".join(problems)
    finally:
        _close(subject, second, bystanders)


def test_losing_the_role_closes_with_4403_and_a_promotion_keeps_sockets_open(server, people):
    subject, second, bystanders = _open_all(server, people)
    try:
        member = people["member"]
        user_set_role(user=member, role=Role.OPERATOR)
        time.sleep(2)  # the re-check runs; a promotion must not close anything
        problems = _bystanders_open(subject + second, people["paths"] + ["/ws/events/ (2)"])
        assert not problems, "promotion closed sockets:\n" + "\n".join(problems)
        member.groups.clear()  # no role at all: not even the panel
        problems = _verdicts(
            subject + second, people["paths"] + ["/ws/events/ (2)"], CLOSE_FORBIDDEN
        )
        problems += _bystanders_open(bystanders, people["other_paths"])
        assert not problems, "\n".join(problems)
    finally:
        _close(subject, second, bystanders)


def test_live_sockets_outlive_group_expiry_and_recheck_without_signals(
    settings, fresh_layer, people
):
    layers = {**settings.CHANNEL_LAYERS}
    layers["default"] = {**layers["default"], "CONFIG": {**layers["default"]["CONFIG"]}}
    layers["default"]["CONFIG"]["group_expiry"] = 3  # re-joined about every second
    settings.CHANNEL_LAYERS = layers
    channel_layers.backends.clear()
    with Server() as server:
        mine = _open(server, "/ws/events/", people["browser"])
        theirs = _open(server, "/ws/events/", people["other_browser"])
        try:
            time.sleep(7)  # more than twice group_expiry
            assert fragment_push(group=user_group(people["member"].pk), html='<p id="x">hi</p>')
            assert mine.recv(timeout=10) == '<p id="x">hi</p>', "dropped from its group"
            # A change no signal announces (a queryset update): the periodic re-check.
            get_user_model().objects.filter(pk=people["member"].pk).update(is_active=False)
            assert _closed_with(mine, timeout=15) == CLOSE_UNAUTHENTICATED
            assert _still_open(theirs)
        finally:
            _close([mine, theirs])


def _members(layer) -> list[bytes]:
    """Every member of any of the layer's groups that is a channel of this process."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    try:
        found = []
        for key in client.scan_iter(match=f"{layer.prefix}:group:*", count=1000):
            found += [m for m in client.zrange(key, 0, -1) if layer.client_prefix.encode() in m]
        return found
    finally:
        client.close()


def test_many_sockets_closing_at_once_log_no_traceback_and_leave_no_member(server, member, caplog):
    caplog.set_level(logging.WARNING)
    cookie = f"sessionid={_session(member).cookies['sessionid'].value}"
    layer = get_channel_layer()

    async def open_one():
        return await aconnect(
            server.url("/ws/events/"),
            origin=server.origin,
            additional_headers={"Cookie": cookie},
            open_timeout=60,
            close_timeout=30,
        )

    async def scenario() -> int:
        sockets = []
        for _ in range(0, MANY, 25):  # a page load at a time, roughly
            sockets += await asyncio.gather(*(open_one() for _ in range(25)))
        joined = len(_members(layer))
        await asyncio.gather(*(ws.close() for ws in sockets))  # all at once
        return joined

    joined = run_async(scenario())
    assert joined >= 2 * MANY  # every socket is in several groups
    wait_for(lambda: not _members(layer), 30, "every group member removed")
    time.sleep(0.5)  # late log records of the last disconnects
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, f"{len(noisy)} error records, the first: {noisy[0].getMessage()}"
    warnings = [r for r in caplog.records if r.name == "apps.core.consumers"]
    assert len(warnings) <= 1, [r.getMessage() for r in warnings]


def test_group_expiry_is_minutes_not_a_day():
    config = django_settings.CHANNEL_LAYERS["default"]["CONFIG"]
    assert 60 <= config.get("group_expiry", 86400) <= 900


def test_signing_out_mid_answer_stops_the_chat_and_keeps_the_partial_answer(
    server, member, caplog, request
):
    caplog.set_level(logging.WARNING)
    sim, run = request.getfixturevalue("chat_server")(time_scale=1)
    conversation = request.getfixturevalue("conversation_for")(member, run, max_tokens=4000)
    browser = _session(member)
    ws = _open(server, f"/ws/chat/{conversation.pk}/", browser)
    try:
        ws.send(json.dumps({"type": "send", "content": "Write a long essay."}))
        while json.loads(ws.recv(timeout=30))["type"] != "delta":
            pass
        assert browser.post(reverse("logout")).status_code in (200, 302)
        assert _closed_with(ws) == CLOSE_UNAUTHENTICATED
    finally:
        ws.close()

    def running() -> float:
        metrics = sim.metrics().items()
        return sum(v for (name, _), v in metrics if name == "vllm:num_requests_running")

    wait_for(lambda: running() == 0, 10, "the upstream request aborted")
    wait_for(
        lambda: Message.objects.get(role="assistant").status != Message.Status.STREAMING,
        10,
        "the answer saved",
    )
    saved = Message.objects.get(role="assistant")
    assert saved.status == Message.Status.STOPPED and saved.content
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not noisy, noisy[0].getMessage()
