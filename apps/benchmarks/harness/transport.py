"""The HTTP/1.1 transport under the harness's httpx client: httpx's own transport
(`_Transport`) over a flat connection pool (`_FlatPool`: O(1) per request, LIFO reuse,
one request per connection) and, for plain HTTP, an asyncio-native network backend
(`_AsyncioBackend`, `_Stream`, `_Protocol`) that stamps every read with the time its bytes
arrived and every write with the time it began. TLS goes through httpcore's default
backend. Why each piece exists, and what it measured: docs/BENCHMARKS.md.

When its bytes arrived: on Linux a plain-HTTP connection is read by `_KernelStamped`, a
small transport of its own that reads with recvmsg and takes the kernel's receive time of
the data (SO_TIMESTAMPNS: stamped as the packet comes in — on loopback inside the
server's own send call), so the time the client's event loop was busy with other chunks,
other requests or anything else is no longer part of what it measures. Elsewhere, or if
the socket option is refused, the stamp is the moment the event loop hands the bytes to
the protocol (`_Protocol.data_received`)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import struct
import sys
import time
from collections.abc import Callable

import httpcore
import httpx

_READ_BUFFER_MAX = 1 << 20  # bytes a connection buffers before it stops reading
_RECV_SIZE = 1 << 16  # bytes one recvmsg reads at most
_WRITE_BUFFER_HIGH = 1 << 16  # unsent bytes past which writers wait (asyncio's default)
# SO_TIMESTAMPNS (asm-generic/socket.h and x86: 35; the 64-bit-time-safe "old" value, a
# struct timespec of two 64-bit fields on every 64-bit Linux); its control message type is
# the same number. Python's socket module does not name it.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
KERNEL_STAMPS = sys.platform.startswith("linux") and sys.maxsize > 2**32


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
        self.received(data, time.monotonic())

    def received(self, data: bytes, at: float) -> None:
        """`data` arrived at `at` (monotonic): the kernel's receive time, or now."""
        self.chunks.append((at, data))
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


_monotonic = time.monotonic


class _RealtimeOffset:
    """time.time() − time.monotonic(), for turning the kernel's realtime stamps into the
    monotonic clock. Read as the tightest of three back-to-back readings (a preemption
    between two clock reads would shift every stamp by its length) and kept for a second:
    the two clocks drift apart only at NTP's slew rate (microseconds a second at most)."""

    def __init__(self) -> None:
        self._offset, self._until = 0.0, -1.0

    def offset(self, now: float) -> float:
        if now >= self._until:
            best = None
            for _ in range(3):
                before, real, after = _monotonic(), time.time(), _monotonic()
                if best is None or after - before < best[0]:
                    best = (after - before, real - (before + after) / 2)
            self._offset, self._until = best[1], now + 1.0
        return self._offset


_REALTIME = _RealtimeOffset()


class _KernelStamped:
    """A plain-TCP transport for `_Protocol` that reads with recvmsg and hands each read
    over with the kernel's receive time of its data (SO_TIMESTAMPNS; for a read that takes
    several packets' bytes at once, the last packet's time — and no read size can do better:
    Linux merges a segment that arrives behind an unread one into it, keeping the newer
    stamp, tcp_try_coalesce), converted from the realtime to
    the monotonic clock. The subset of asyncio.Transport that `_Stream` uses: write with
    back-pressure, close after the pending writes, pause/resume reading, extra info."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol):
        self._loop, self._sock, self._protocol = loop, sock, protocol
        self._fd = sock.fileno()
        self._view = memoryview(bytearray(_RECV_SIZE))
        self._ancillary = socket.CMSG_SPACE(_TIMESPEC.size)
        self._pending = bytearray()  # written but not yet taken by the kernel
        self._closing = self._closed = self._reading = self._writers_paused = False
        protocol.connection_made(self)
        self.resume_reading()

    def _on_readable(self) -> None:
        try:
            n, ancillary, _flags, _ = self._sock.recvmsg_into([self._view], self._ancillary)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        now = _monotonic()
        if n == 0:
            self._protocol.eof_received()
            self.close()  # stops reading too
            return
        at = now
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                # realtime → monotonic; never later than now (a stepped clock cannot put
                # the arrival after the read)
                at = min(seconds + nanoseconds * 1e-9 - _REALTIME.offset(now), now)
        self._protocol.received(bytes(self._view[:n]), at)

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        if not self._pending:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._shut(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._on_writable)
        self._pending += data
        if len(self._pending) > _WRITE_BUFFER_HIGH and not self._writers_paused:
            self._writers_paused = True
            self._protocol.pause_writing()

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shut(exc)
            return
        del self._pending[:sent]
        if self._pending:
            return
        self._loop.remove_writer(self._fd)
        if self._writers_paused:
            self._writers_paused = False
            self._protocol.resume_writing()
        if self._closing:
            self._shut(None)

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Stop reading now; the socket closes once what was written has gone."""
        if self._closing:
            return
        self._closing = True
        self.pause_reading()
        if not self._pending:
            self._shut(None)

    def _shut(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closing = self._closed = True
        self.pause_reading()
        self._loop.remove_writer(self._fd)
        self._pending.clear()
        self._sock.close()
        # as asyncio's transports do: the protocol hears of it on the next loop turn
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def get_extra_info(self, name: str, default=None):
        if name == "socket":
            return self._sock
        with contextlib.suppress(OSError):
            if name == "sockname":
                return self._sock.getsockname()
            if name == "peername":
                return self._sock.getpeername()
        return default


async def _connect_kernel_stamped(host: str, port: int, local_address: str | None):
    """A connected `(_KernelStamped, _Protocol)`, or None when this kernel will not stamp
    a TCP socket's reads (the caller then uses the loop's own transport)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                sock.close()
                return None
            sock.setblocking(False)
            if local_address:
                sock.bind((local_address, 0))
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = _Protocol()
        return _KernelStamped(loop, sock, protocol), protocol
    raise error or OSError(f"no address for {host}:{port}")


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
    write), with receive times that are the kernel's (`_KernelStamped`, Linux) or else
    taken in the protocol callback, when the loop hands the bytes over, rather than when a
    task gets round to them: at 64 streams the callback stamps cut the TTFT timestamp error
    p99 from ~8 ms to ~3 ms here; the kernel's take the client's own delays out of it
    (docs/BENCHMARKS.md). `kernel_stamps=False` keeps the callback stamps."""

    def __init__(self, kernel_stamps: bool = KERNEL_STAMPS):
        self.kernel_stamps = kernel_stamps

    async def connect_tcp(self, host, port, timeout=None, local_address=None,
                          socket_options=None) -> _Stream:  # fmt: skip
        loop = asyncio.get_running_loop()
        connected = None
        try:
            async with asyncio.timeout(timeout):
                if self.kernel_stamps:
                    connected = await _connect_kernel_stamped(host, port, local_address)
                if connected is None:
                    self.kernel_stamps = False  # this kernel does not: ask once
                    connected = await loop.create_connection(
                        _Protocol, host, port,
                        local_addr=(local_address, 0) if local_address else None,
                    )  # fmt: skip
                transport, protocol = connected
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
