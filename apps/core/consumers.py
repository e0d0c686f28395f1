"""The panel's sockets: one base class (`PanelSocket`) for who may open one, how long it
stays open, and how it joins and leaves channel-layer groups.

- Opening: `authorise(permission)` refuses anonymous sockets (4401) and accounts without
  the capability (4403). Foreign Origins never get here (asgi.py).
- Staying open: an authorised socket joins its account's and its session's revocation
  groups (apps/accounts/revoke.py). Signing out closes that session's sockets (4401);
  a change to the account makes every socket of it re-check from the database and close
  with 4401 (session gone, password changed, deactivated) or 4403 (capability lost).
- Groups: the layer forgets a member `group_expiry` seconds after it joined (settings
  CHANNEL_LAYERS: minutes, so a member a crashed process never removed is gone soon), so
  every socket re-joins its groups every third of that, and re-checks its account then
  too (which covers changes made without signals, and sessions that expired).
- Leaving: group operations of one process's sockets go through a gate of
  GROUP_OPS_AT_ONCE (the layer's Redis pool has 100 connections and fails past them: 500
  sockets closing at once were 500 concurrent ZREMs) with a timeout; a failure is one
  warning line (at most one a minute, with a count), never a traceback — what could not
  be removed expires with `group_expiry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import weakref
from importlib import import_module

from channels.db import aclose_old_connections, database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.utils.crypto import constant_time_compare

from apps.accounts.revoke import account_group, session_group
from apps.accounts.roles import VIEW_PANEL
from apps.core.events import BROADCAST_GROUP, user_group

log = logging.getLogger(__name__)

# Close codes in the 4000 range are ours; browsers see them in CloseEvent.code.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_UNAVAILABLE = 1011  # the channel layer could not be joined: try again later

GROUP_OPS_AT_ONCE = 32
GROUP_OP_TIMEOUT_S = 10.0
WARN_EVERY_S = 60.0

_gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_leaving: set[asyncio.Task] = set()  # clean-ups of cancelled sockets, held until done


def _gate() -> asyncio.Semaphore:
    """One gate per event loop (a semaphore belongs to its loop)."""
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(GROUP_OPS_AT_ONCE)
    return gate


class _Throttled:
    """A warning at most every `every_s`, the next one saying how many were held back."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = float("-inf")
        self.held = 0

    def warning(self, message: str, *args) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.held += 1
            return
        if self.held:
            message += f" (and {self.held} more like it in the last {self.every_s:g} s)"
        self.last, self.held = now, 0
        log.warning(message, *args)


_warn = _Throttled(WARN_EVERY_S)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _session_verdict(session_key: str | None, user_id: int, permission: str) -> int | None:
    """None while the session still signs `user_id` in and the user has `permission`;
    else the close code. Django's own session check (django.contrib.auth.get_user), read
    only: it never flushes or cycles the browser's session."""
    if not session_key:
        return CLOSE_UNAUTHENTICATED
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    try:
        session_user = get_user_model()._meta.pk.to_python(session[SESSION_KEY])
        backend_path = session[BACKEND_SESSION_KEY]
    except KeyError:  # signed out, expired, or deleted
        return CLOSE_UNAUTHENTICATED
    if session_user != user_id or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return CLOSE_UNAUTHENTICATED
    user = load_backend(backend_path).get_user(session_user)  # None when inactive
    if user is None:
        return CLOSE_UNAUTHENTICATED
    stored = session.get(HASH_SESSION_KEY)
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    if not stored or not any(constant_time_compare(stored, h) for h in hashes):
        return CLOSE_UNAUTHENTICATED  # the password changed since this session signed in
    if not user.has_perm(permission):
        return CLOSE_FORBIDDEN
    return None


class PanelSocket(AsyncWebsocketConsumer):
    """Base of every WebSocket consumer of the panel (see the module docstring)."""

    groups_joined: list[str]
    _user_id: int | None = None
    _session_key: str | None = None
    _permission: str = VIEW_PANEL
    _keeper: asyncio.Task | None = None
    _closing: bool = False

    async def __call__(self, scope, receive, send):
        self.groups_joined = []
        try:
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            # The server gave up on this socket (a graceful-shutdown timeout): end quietly,
            # and leave the groups from a task of its own if the loop lives on.
            self._stop_keeper()
            task = asyncio.get_running_loop().create_task(self._leave_all())
            _leaving.add(task)
            task.add_done_callback(_leaving.discard)

    # --- opening ------------------------------------------------------------------------

    async def authorise(self, permission: str):
        """The socket's user if it may use `permission`, else None after closing it (4401
        anonymous, 4403 without the capability, 1011 when the layer is unreachable)."""
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return None
        if not await database_sync_to_async(user.has_perm)(permission):
            await self.close(code=CLOSE_FORBIDDEN)
            return None
        session = self.scope.get("session")
        self._user_id, self._permission = user.pk, permission
        self._session_key = getattr(session, "session_key", None)
        if not await self.join(account_group(user.pk)):
            return None
        if self._session_key and not await self.join(session_group(self._session_key)):
            return None
        return user

    async def join(self, group: str) -> bool:
        """Join a group (left again on disconnect); False after closing the socket (1011)
        when the layer cannot be reached."""
        try:
            await self._group_op(self.channel_layer.group_add, group)
        except Exception as exc:
            _warn.warning("a socket could not join group %s (%s): refused", group, _reason(exc))
            await self.close(code=CLOSE_UNAVAILABLE)
            return False
        self.groups_joined.append(group)
        if self._keeper is None:
            self._keeper = asyncio.get_running_loop().create_task(self._keep_safely())
        return True

    async def _group_op(self, op, group: str) -> None:
        # The timeout covers the wait at the gate too: a hung Redis holds nobody long.
        async with asyncio.timeout(GROUP_OP_TIMEOUT_S), _gate():
            await op(group, self.channel_name)

    # --- staying open -------------------------------------------------------------------

    def _refresh_s(self) -> float:
        expiry = getattr(self.channel_layer, "group_expiry", 86400)
        return max(1.0, expiry / 3)

    async def _keep_safely(self) -> None:
        try:
            await self._keep()
        except Exception as exc:  # never a "Task exception was never retrieved" traceback
            _warn.warning("a socket stopped refreshing its groups (%s)", _reason(exc))

    async def _keep(self) -> None:
        """Re-join the groups (and re-check the account) every third of group_expiry."""
        while not self._closing:
            await asyncio.sleep(self._refresh_s() * random.uniform(0.8, 1.0))  # noqa: S311
            if self._user_id is not None:
                await self._recheck()
            if self._closing:
                return
            for group in list(self.groups_joined):
                try:
                    await self._group_op(self.channel_layer.group_add, group)
                except Exception as exc:
                    _warn.warning(
                        "a socket could not refresh group %s (%s): retried in %d s",
                        group,
                        _reason(exc),
                        self._refresh_s(),
                    )
                    break

    async def _recheck(self) -> None:
        try:
            verdict = await database_sync_to_async(_session_verdict)(
                self._session_key, self._user_id, self._permission
            )
        except Exception as exc:  # the database is busy: keep the socket, check later
            _warn.warning("a socket could not re-check its account (%s)", _reason(exc))
            return
        if verdict is not None:
            await self._shut(verdict)

    async def _shut(self, code: int) -> None:
        if not self._closing:
            self._closing = True
            # The browser may have gone already: its disconnect cleans up either way.
            with contextlib.suppress(Exception):
                await self.close(code=code)

    async def session_revoke(self, event: dict) -> None:
        """This browser session signed out."""
        await self._shut(CLOSE_UNAUTHENTICATED)

    async def account_changed(self, event: dict) -> None:
        """The account changed: still signed in, still allowed?"""
        if not self._closing:
            await self._recheck()

    async def send(self, text_data=None, bytes_data=None, close=False):
        if self._closing:  # e.g. a chat answer still streaming when the session ended
            raise ConnectionError("the socket was closed: its access ended")
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def websocket_receive(self, message):
        if self._closing:  # revoked: what the browser sent after that is not acted on
            return
        await super().websocket_receive(message)

    async def dispatch(self, message):
        if self._closing and not str(message.get("type", "")).startswith("websocket."):
            return  # a revoked socket gets no more pushes, samples or re-checks
        await super().dispatch(message)

    # --- leaving ------------------------------------------------------------------------

    def _stop_keeper(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None

    async def _leave_all(self) -> None:
        groups, self.groups_joined = getattr(self, "groups_joined", []), []
        for i, group in enumerate(groups):
            try:
                await self._group_op(self.channel_layer.group_discard, group)
            except Exception as exc:  # the rest would fail alike: they expire instead
                _warn.warning(
                    "a closing socket could not leave %d group(s) (%s): they expire within %d s",
                    len(groups) - i,
                    _reason(exc),
                    getattr(self.channel_layer, "group_expiry", 0),
                )
                return

    async def websocket_disconnect(self, message):
        self._stop_keeper()
        await self._leave_all()
        await self.disconnect(message.get("code", 1000))
        with contextlib.suppress(Exception):
            await aclose_old_connections()
        raise StopConsumer()


async def authorise(consumer: PanelSocket, permission: str):
    """`consumer.authorise(permission)`, for callers that prefer a function."""
    return await consumer.authorise(permission)


class EventsConsumer(PanelSocket):
    """The browser's live channel: pushed HTML fragments for every page.

    Anonymous sockets and accounts without a role are refused; foreign Origins never
    get here (asgi.py).
    """

    async def connect(self) -> None:
        user = await self.authorise(VIEW_PANEL)
        if user is None:
            return
        for group in (BROADCAST_GROUP, user_group(user.pk)):
            if not await self.join(group):
                return
        await self.accept()

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
