"""uvicorn's HTTP protocol with a deadline and a size bound for the request head (slowloris).

uvicorn has no header-read timeout: a connection that trickles its request line and
headers (a byte a second), or connects and sends nothing, is held for as long as the
client likes; its keep-alive timer only runs between requests and any byte stops it. The
protocol here closes a connection whose request head is not complete HTTP_HEADER_TIMEOUT
seconds (default 10) after the connection opened or the next request's first byte came.

`HttpToolsBoundedProtocol` is the one every uvicorn command line uses (`--http
sparkpanel.httpserver:HttpToolsBoundedProtocol`, tools/container-start.sh and
tools/devrun.py). It is uvicorn's httptools (llhttp, C) protocol: the gateway relays every
token of every stream through it, and h11's pure-Python `send` cost ~70 µs per chunk
(docs/BENCHMARKS.md, "Gateway overhead"). httptools alone buffers a head of any size, so
this class counts the bytes of a head still in progress and answers 431 (and closes) past
`--h11-max-incomplete-event-size` (uvicorn's flag for the largest head; 16 KiB on every
command line). Nothing here imports Django (uvicorn loads it before the application).
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from sparkpanel.env import env_int

HEADER_TIMEOUT = env_int("HTTP_HEADER_TIMEOUT", 10)
HEADER_MAX_BYTES = 16 * 1024  # when uvicorn is not given --h11-max-incomplete-event-size

log = logging.getLogger("uvicorn.error")


class HttpToolsBoundedProtocol(HttpToolsProtocol):
    """httptools with a head deadline and a head size bound (see the module's text).

    Two counts bound the head: the bytes received while a head is still incomplete (a
    trickled or endless head is cut off before it is parsed to the end), and the parsed
    request line and header fields of a complete head (a whole head that arrived in one
    read is measured too)."""

    header_timeout: float = HEADER_TIMEOUT
    _head_deadline: asyncio.TimerHandle | None = None
    _in_head = True  # between a request's first byte (or the connection's start) and its head
    _head_bytes = 0  # received while the head is incomplete
    _head_fields = 0  # request target + header fields parsed so far
    _refused = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_max_bytes = self.config.h11_max_incomplete_event_size or HEADER_MAX_BYTES
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            if self._head_deadline is None and self._idle():
                self._arm_head_deadline()  # the first byte of the next request
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.head_max_bytes:
            self._refuse_head()

    def on_message_begin(self) -> None:
        self._head_fields = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._head_fields += len(url) + 16  # method, version, line ends
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_fields += len(name) + len(value) + 4
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm_head_deadline()
        if self._head_fields > self.head_max_bytes:
            self._refuse_head()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        self._in_head = True  # what follows is the next request's head

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _idle(self) -> bool:
        """No answer is being sent (a stream is never cut for a pipelined byte)."""
        return self.cycle is None or self.cycle.response_complete

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self._in_head and self._idle() and not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.warning(
                "Closed the connection from %s: no complete request head within %s s",
                client, self.header_timeout,
            )  # fmt: skip
            self.transport.close()

    def _refuse_head(self) -> None:
        self._refused, self._in_head = True, False
        self._disarm_head_deadline()
        if self.transport.is_closing():
            return
        message = b"Request header fields too large"
        self.transport.write(
            STATUS_LINE[431] + b"content-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(message), message)
        )  # fmt: skip
        self.transport.close()
