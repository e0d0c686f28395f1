"""uvicorn's h11 HTTP protocol with a deadline for the request head (slowloris).

uvicorn has no header-read timeout: a connection that trickles its request line and
headers (a byte a second), or connects and sends nothing, is held for as long as the
client likes; its keep-alive timer only runs between requests and any byte stops it. This
protocol closes a connection whose request head is not complete HTTP_HEADER_TIMEOUT
seconds (default 10) after the connection opened or the next request's first byte came.

Every uvicorn command line uses it (`--http sparkpanel.httpserver:H11HeaderTimeoutProtocol`,
tools/container-start.sh and tools/devrun.py), with `--h11-max-incomplete-event-size`
bounding the head's size. h11, not httptools: httptools buffers a head of any size.
Nothing here imports Django (uvicorn loads it before the application).
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from sparkpanel.env import env_int

HEADER_TIMEOUT = env_int("HTTP_HEADER_TIMEOUT", 10)

log = logging.getLogger("uvicorn.error")


class H11HeaderTimeoutProtocol(H11Protocol):
    header_timeout: float = HEADER_TIMEOUT
    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._head_deadline is None and self.conn.their_state is h11.IDLE:
            self._arm_head_deadline()  # the first byte of the next request
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_deadline()  # the head is in (or the connection is done)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning(
                "Closed the connection from %s: no complete request head within %s s",
                client, self.header_timeout,
            )  # fmt: skip
            self.transport.close()
