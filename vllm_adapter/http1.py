"""A lean HTTP/1.1 client for a vLLM server, made for relaying: the gateway's upstream.

Why not httpx: a relay pays its client's overhead on every request and every chunk, and
httpx (with httpcore under it) spends several hundred microseconds per request and tens
per chunk in Python. Here a connection is an `asyncio.Protocol` whose bytes go straight
into httptools' C parser; the body arrives as the parser hands it over (chunked framing
removed), one `bytes` per read, with no copy and no re-buffering. Connections are kept
alive and reused, newest first, per server.

- `Pool.request(...)` sends one request and returns an `UpstreamResponse` once the status
  line and headers are in; `UpstreamResponse.chunks()` yields the body as it arrives;
  `UpstreamResponse.abort()` closes the connection (vLLM then aborts the request: that is
  how a client's disconnect reaches the engine).
- Errors: `UpstreamError(kind, message)` with kind ``connect`` (nothing was sent: another
  replica may take the request), ``closed`` (the server went away after the request was
  sent), ``timeout``, ``protocol``, and from `UpstreamResponse.read` ``too_large`` (past
  its limit) or ``busy`` (the process's buffer budget is spent).

Plain HTTP only: a Spark's vLLM serves plain HTTP on the LAN. No Django, no panel imports.
"""

from __future__ import annotations

import asyncio
import collections
import socket
from collections.abc import AsyncIterator

import httptools

__all__ = ["Pool", "UpstreamError", "UpstreamResponse"]

_READ_PAUSE_BYTES = 1 << 20  # unread body bytes a connection holds before it stops reading
_IDLE_MAX = 256  # idle connections kept per server


class UpstreamError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class _Connection(asyncio.Protocol):
    """One keep-alive connection; reads are parsed as they arrive."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.head_done = False
        self.complete = False
        self.keep_alive = False  # as the finished answer said (see on_message_complete)
        self.lost = False
        self.error: str | None = None
        self.waiter: asyncio.Future | None = None
        self.paused = False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = f"the server's answer is not HTTP/1.1: {exc}"
            self.transport.close()
        self._wake()

    def eof_received(self) -> bool:
        self.lost = True
        self._wake()
        return False

    def connection_lost(self, exc) -> None:
        self.lost = True
        self._wake()

    # httptools callbacks
    def on_status(self, status: bytes) -> None:
        self.status = self.parser.get_status_code()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _READ_PAUSE_BYTES and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        # Asked here, not later: once the answer is complete the parser starts over for the
        # next one and says False for every connection (llhttp resets what it read).
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True

    # ours
    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until the next read, close or error; TimeoutError after `timeout` seconds (a timer
        on the future: asyncio.wait_for would wrap every wait in a task of its own)."""
        loop = asyncio.get_running_loop()
        self.waiter = future = loop.create_future()
        timer = loop.call_later(timeout, _time_out, future)
        try:
            await future
        finally:
            timer.cancel()
            self.waiter = None

    def reusable(self) -> bool:
        return (
            self.complete
            and not self.lost
            and self.error is None
            and self.keep_alive
            and not self.transport.is_closing()
        )

    def reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status, self.headers = 0, []
        self.chunks.clear()
        self.buffered = 0
        self.head_done = self.complete = self.keep_alive = False


def _time_out(future: asyncio.Future) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class UpstreamResponse:
    def __init__(self, pool: Pool, key: tuple[str, int], conn: _Connection, timeout: float):
        self._pool, self._key, self._conn = pool, key, conn
        self.status = conn.status
        self.headers = conn.headers
        self.timeout = timeout  # the longest wait for the next bytes
        self._done = False

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, one read at a time."""
        conn = self._conn
        try:
            while True:
                while conn.chunks:
                    data = conn.chunks.popleft()
                    conn.buffered -= len(data)
                    if conn.paused and conn.buffered < _READ_PAUSE_BYTES // 2:
                        conn.paused = False
                        conn.transport.resume_reading()
                    yield data
                if conn.complete:
                    self._finish()
                    return
                if conn.error:
                    raise UpstreamError("protocol", conn.error)
                if conn.lost:
                    raise UpstreamError("closed", "the model server closed the connection")
                try:
                    await conn.wait(self.timeout)
                except TimeoutError:
                    raise UpstreamError(
                        "timeout", f"the model server sent nothing for {self.timeout:g} s"
                    ) from None
        finally:
            if not self._done:
                self.abort()

    async def read(self, limit: int, budget=None) -> bytes:
        """The whole body: refused past `limit` bytes (kind ``too_large``), or when `budget`
        (a `relay.Budget`: what the whole process may hold) cannot take it (kind ``busy``).
        The bytes returned stay taken from `budget`: the caller gives them back once it
        has passed the body on; on an error they are given back here."""
        parts: list[bytes] = []
        size = 0
        try:
            async for data in self.chunks():
                if size + len(data) > limit:
                    self.abort()
                    raise UpstreamError("too_large", f"the answer is larger than {limit} bytes")
                if budget is not None and not budget.take(len(data)):
                    self.abort()
                    raise UpstreamError("busy", "the panel holds too many large answers")
                size += len(data)
                parts.append(data)
        except BaseException:
            if budget is not None:
                budget.give(size)
            raise
        return b"".join(parts)

    def _finish(self) -> None:
        self._done = True
        self._pool._release(self._key, self._conn)

    def abort(self) -> None:
        """Close the connection: the server sees its client go away (vLLM aborts the
        request)."""
        if not self._done:
            self._done = True
            self._conn.transport.close()


class Pool:
    """Keep-alive connections per (host, port), reused newest first."""

    def __init__(self, connect_timeout: float = 5.0):
        self.connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, key: tuple[str, int]) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.lost and not conn.transport.is_closing():
                return conn, True
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, key[0], key[1]), self.connect_timeout
            )
        except TimeoutError:
            raise UpstreamError(
                "connect", f"no connection to {key[0]}:{key[1]} within {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise UpstreamError("connect", f"cannot connect to {key[0]}:{key[1]}: {exc}") from None
        return conn, False

    def _release(self, key: tuple[str, int], conn: _Connection) -> None:
        if not conn.reusable():
            conn.transport.close()
            return
        idle = self._idle.setdefault(key, [])
        if len(idle) >= _IDLE_MAX:
            conn.transport.close()
            return
        conn.reset()
        idle.append(conn)

    async def request(
        self,
        host: str,
        port: int,
        method: str,
        path: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        *,
        head_timeout: float,
        read_timeout: float,
    ) -> UpstreamResponse:
        """Send one request; returns once the answer's head is in. A kept-alive connection
        the server closed meanwhile is retried once on a fresh one (nothing was processed)."""
        key = (host, port)
        head = [f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()]
        for name, value in headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"Content-Length: %d\r\n\r\n" % len(body))
        payload = b"".join(head) + body
        for attempt in (0, 1):
            conn, reused = await self._connect(key)
            conn.transport.write(payload)
            try:
                while not conn.head_done:
                    if conn.error:
                        raise UpstreamError("protocol", conn.error)
                    if conn.lost:
                        if reused and attempt == 0 and not conn.status:
                            break  # a stale kept-alive connection: once more, fresh
                        raise UpstreamError("closed", "the model server closed the connection")
                    try:
                        await conn.wait(head_timeout)
                    except TimeoutError:
                        raise UpstreamError(
                            "timeout", f"the model server did not answer within {head_timeout:g} s"
                        ) from None
            except BaseException:
                conn.transport.close()
                raise
            if conn.head_done:
                return UpstreamResponse(self, key, conn, read_timeout)
            conn.transport.close()
        raise UpstreamError("closed", "the model server closed the connection")  # pragma: no cover

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.transport.close()
        self._idle.clear()
