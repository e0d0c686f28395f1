"""The HTTP/1.1 transport under the harness's httpx client: httpx's own transport
(`_Transport`) over a flat connection pool (`_FlatPool`: O(1) per request, LIFO reuse,
one request per connection) and, for plain HTTP, an asyncio-native network backend
(`_AsyncioBackend`, `_Stream`, `_Protocol`) that stamps every read with the time the
event loop handed its bytes over and every write with the time it began. TLS goes
through httpcore's default backend. Why each piece exists, and what it measured:
docs/BENCHMARKS.md."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import time
from collections.abc import Callable

import httpcore
import httpx

_READ_BUFFER_MAX = 1 << 20  # bytes a connection buffers before it stops reading


class _Protocol(asyncio.Protocol):
    """Receives a connection's bytes and stamps each read with `time.monotonic()` the
    moment the event loop hands them over (before any task runs on them)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[tuple[float, bytes]] = collections.deque()
        self.buffered = 0
        self.eof = False
        self.error: BaseException | None = None
        self.read_waiter: asyncio.Future | None = None
        self.drain_waiter: asyncio.Future | None = None
        self.reading_paused = False
        self.writing_paused = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.monotonic(), data))
        self.buffered += len(data)
        if self.buffered > _READ_BUFFER_MAX and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake("read_waiter")

    def eof_received(self) -> bool:
        self.eof = True
        self._wake("read_waiter")
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self.eof = True
        self.error = exc
        self._wake("read_waiter")
        self._wake("drain_waiter")

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake("drain_waiter")

    def _wake(self, name: str) -> None:
        waiter = getattr(self, name)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Stream(httpcore.AsyncNetworkStream):
    """An httpcore network stream on a plain asyncio transport. `last_read_at` is when
    the bytes the last `read()` returned arrived; `last_write_at` is when the last
    `write()` began handing its bytes to the kernel (or the transport's buffer)."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol):
        self._transport, self._protocol = transport, protocol
        self.last_read_at: float | None = None
        self.last_write_at: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        if not p.chunks:
            if p.eof:
                return self._at_eof()
            p.read_waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:  # streams: no read timeout, and no timer per read
                    await p.read_waiter
                else:
                    async with asyncio.timeout(timeout):
                        await p.read_waiter
            except TimeoutError:
                raise httpcore.ReadTimeout("timed out reading from the server") from None
            finally:
                p.read_waiter = None
            if not p.chunks:
                return self._at_eof()
        at, data = p.chunks.popleft()
        if len(data) > max_bytes:
            p.chunks.appendleft((at, data[max_bytes:]))
            data = data[:max_bytes]
        p.buffered -= len(data)
        if p.reading_paused and p.buffered < _READ_BUFFER_MAX // 2:
            p.reading_paused = False
            self._transport.resume_reading()
        self.last_read_at = at
        return data

    def _at_eof(self) -> bytes:
        error = self._protocol.error
        if error is not None:
            raise httpcore.ReadError(f"{type(error).__name__}: {error}")
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        p = self._protocol
        if p.error is not None or self._transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        # Stamped before the write: the send syscall wakes the server, which may preempt this
        # process on a busy core; a stamp taken after could then be later than the answer.
        at = time.monotonic()
        self._transport.write(buffer)
        self.last_write_at = at
        if p.writing_paused:
            p.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await p.drain_waiter
            except TimeoutError:
                raise httpcore.WriteTimeout("timed out writing to the server") from None
            finally:
                p.drain_waiter = None
            if p.error is not None:
                raise httpcore.WriteError(f"{type(p.error).__name__}: {p.error}")

    async def aclose(self) -> None:
        self._transport.close()

    def get_extra_info(self, info: str):
        if info == "is_readable":  # httpcore: has an idle connection been closed or sent to?
            return bool(self._protocol.chunks) or self._protocol.eof
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class _AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Plain-HTTP connections straight on the asyncio loop (no anyio layers per read and
    write), with receive times taken in the protocol callback, when the loop hands the
    bytes over, rather than when a task gets round to them: at 64 streams that cut the
    TTFT timestamp error p99 from ~8 ms to ~3 ms here (docs/BENCHMARKS.md)."""

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None) -> _Stream:  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port,
                    local_addr=(local_address, 0) if local_address else None,
                )  # fmt: skip
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}:{port}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise NotImplementedError("unix sockets are not supported")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _FlatPool:
    """A connection pool with O(1) work per request, LIFO reuse, one request per
    connection (HTTP/1.1), for `_Transport`.

    httpcore's AsyncConnectionPool re-scans every connection whenever a request starts or
    a response closes (a poll() per idle connection, and a quadratic count of idle ones):
    measured here, at 64 closed-loop streams that alone delayed sends by seconds and the
    client's event loop by tens of milliseconds.
    """

    def __init__(self, max_connections: int, keepalive_expiry: float | None, ssl_context):
        self._idle: dict[tuple, list[httpcore.AsyncHTTPConnection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context
        self._backend = _AsyncioBackend()

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        timeout = (request.extensions.get("timeout") or {}).get("pool")
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise httpcore.PoolTimeout("no free connection within the pool timeout") from None
        origin = request.url.origin
        try:
            for attempt in range(3):
                connection = await self._checkout(origin, fresh=attempt > 0)
                try:
                    response = await connection.handle_async_request(request)
                except httpcore.ConnectionNotAvailable:
                    await connection.aclose()
                    continue
                except BaseException:
                    await connection.aclose()
                    raise
                break
            else:
                raise httpcore.ConnectError("no usable connection")
        except BaseException:
            self._slots.release()
            raise
        stream = _ReleasingStream(response.stream, lambda: self._release(origin, connection))
        return httpcore.Response(status=response.status, headers=response.headers,
                                 content=stream, extensions=response.extensions)  # fmt: skip

    async def _checkout(self, origin: httpcore.Origin, fresh: bool):
        idle = self._idle.get(_origin_key(origin))
        while idle and not fresh:
            connection = idle.pop()
            if connection.is_available() and not connection.has_expired():
                return connection
            await connection.aclose()
        return httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            # TLS goes through httpcore's default (anyio) backend.
            network_backend=self._backend if origin.scheme == b"http" else None,
        )

    def _release(self, origin: httpcore.Origin, connection) -> None:
        self._slots.release()
        if connection.is_idle():
            self._idle.setdefault(_origin_key(origin), []).append(connection)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                await connection.aclose()

    async def __aenter__(self) -> _FlatPool:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _origin_key(origin: httpcore.Origin) -> tuple:
    return origin.scheme, origin.host, origin.port


class _ReleasingStream:
    """A response body that hands its connection back to the pool once closed."""

    def __init__(self, stream, release: Callable[[], None]):
        self._stream, self._release = stream, release

    def __aiter__(self):
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        try:
            if hasattr(self._stream, "aclose"):
                await self._stream.aclose()
        finally:
            release()


class _Transport(httpx.AsyncHTTPTransport):
    """httpx's own transport (request/response mapping, exception mapping) over `_FlatPool`."""

    def __init__(self, limits: httpx.Limits):
        # No super().__init__(): all it does is build httpcore's pool (and an SSL context,
        # 40 ms); httpcore makes its default SSL context itself when https needs one.
        self._pool = _FlatPool(limits.max_connections or 1024, limits.keepalive_expiry, None)
