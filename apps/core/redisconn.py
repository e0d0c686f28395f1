"""The panel's own door to Redis (no Django: callers pass the URL).

Celery's broker and the Channels layer reach Redis through their own libraries, set up in
settings; everything the panel itself asks Redis (live versions and shared hashes in
``apps/core/live.py``, the health check in ``apps/core/selectors.py``, ``make run``'s wait
for Redis in ``tools/devrun.py``, the gateway's keys, limits and usage queue in
``apps/gateway/store.py``) goes through here: redis-py's clients for the panel's own
(sync) code, and `PipelinedRedis` for the gateway's hot path.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import threading
import urllib.parse

import redis

RedisError = redis.RedisError

_clients: dict[tuple[str, float], redis.Redis] = {}
_clients_lock = threading.Lock()


def shared_client(url: str, *, timeout: float) -> redis.Redis:
    """One pooled client per URL (and timeout) for the life of the process; answers are
    decoded to str."""
    with _clients_lock:
        client = _clients.get((url, timeout))
        if client is None:
            client = redis.Redis.from_url(
                url, socket_connect_timeout=timeout, socket_timeout=timeout, decode_responses=True
            )
            _clients[(url, timeout)] = client
    return client


def ping(url: str, *, timeout: float = 0.5) -> str | None:
    """None when Redis at ``url`` answers a PING within ``timeout``, else why not. A fresh
    connection each time (a health check must not be answered by a pooled socket)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
        return None
    except redis.RedisError as exc:
        return str(exc)
    finally:
        client.close()


class PipelinedRedis:
    """A lean asyncio Redis client for a hot path: ONE connection, every command written at
    once and answered in order (Redis answers a connection's commands in the order it got
    them), so concurrent callers share the connection as one pipeline with no pool, no
    lock and no round trip of their own. RESP2 replies (strings, integers, bulk strings,
    arrays, errors). A lost connection fails the commands in flight with RedisError; the
    next command reconnects. Scripts run by EVALSHA, loaded on first NOSCRIPT.

    Why: redis-py's asyncio client measured 1.5 ms p50 / 10.7 ms p99 per EVALSHA at 8
    concurrent callers and 13 / 90 ms at 64 on this machine (a connection per caller);
    docs/BENCHMARKS.md, "Gateway overhead"."""

    def __init__(self, url: str, timeout: float = 2.0):
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.password = urllib.parse.unquote(parts.password) if parts.password else None
        self.username = urllib.parse.unquote(parts.username) if parts.username else None
        self.db = int(parts.path.strip("/") or 0)
        self.timeout = timeout
        self._protocol: _RespProtocol | None = None
        self._connecting = None
        self._shas: dict[str, str] = {}

    async def _connection(self) -> _RespProtocol:
        protocol = self._protocol
        if protocol is not None and not protocol.lost:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _RespProtocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(_RespProtocol, self.host, self.port), self.timeout
            )
        except (OSError, TimeoutError) as exc:
            raise redis.ConnectionError(
                f"cannot reach Redis at {self.host}:{self.port}: {exc}"
            ) from None
        if self.password:
            auth = [self.username, self.password] if self.username else [self.password]
            await protocol.call(self.timeout, "AUTH", *auth)
        if self.db:
            await protocol.call(self.timeout, "SELECT", self.db)
        self._protocol = protocol
        return protocol

    async def call(self, *args):
        protocol = await self._connection()
        return await protocol.call(self.timeout, *args)

    async def script(self, source: str, keys: list, args: list):
        sha = (
            self._shas.get(source)
            or hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
        )
        self._shas[source] = sha
        try:
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)
        except redis.ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            return await self.call("EVAL", source, len(keys), *keys, *args)

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()


def _encode(args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, str):
            data = arg.encode()
        else:
            data = str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Incomplete(Exception):
    pass


def _parse(buf: bytes, pos: int):
    """(reply, next position) of the RESP2 reply at `pos`; raises _Incomplete."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _Incomplete
    kind, line = buf[pos : pos + 1], buf[pos + 1 : end]
    pos = end + 2
    if kind == b"+":
        return line.decode(), pos
    if kind == b"-":
        return redis.ResponseError(line.decode()), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        size = int(line)
        if size < 0:
            return None, pos
        if len(buf) < pos + size + 2:
            raise _Incomplete
        return buf[pos : pos + size].decode(), pos + size + 2
    if kind == b"*":
        count = int(line)
        if count < 0:
            return None, pos
        items = []
        for _ in range(count):
            item, pos = _parse(buf, pos)
            items.append(item)
        return items, pos
    raise redis.ResponseError(f"unexpected reply from Redis: {buf[pos - 1 : pos + 40]!r}")


class _RespProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport = None
        self.waiting: collections.deque = collections.deque()
        self.buffer = b""
        self.lost = False
        # Commands issued in one pass of the event loop leave in one write: a burst of
        # requests wakes Redis once, not once per command (on a shared core each wake-up
        # is a switch between the two processes).
        self.pending: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        pos = 0
        try:
            while pos < len(buf):
                reply, pos = _parse(buf, pos)
                future = self.waiting.popleft()
                if not future.done():
                    if isinstance(reply, redis.ResponseError):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        except _Incomplete:
            pass
        self.buffer = buf[pos:]

    def connection_lost(self, exc) -> None:
        self.lost = True
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(redis.ConnectionError(f"Redis closed the connection: {exc}"))

    async def call(self, timeout: float, *args):
        if self.lost:
            raise redis.ConnectionError("Redis closed the connection")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append(future)
        if not self.pending:
            loop.call_soon(self._flush)
        self.pending.append(_encode(args))
        timer = loop.call_later(timeout, _expire, future, self.transport)
        try:
            return await future
        finally:
            timer.cancel()

    def _flush(self) -> None:
        pending, self.pending = self.pending, []
        if not self.lost:
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))


def _expire(future, transport) -> None:
    # A reply that never came: the connection's order is lost, so it is closed.
    if not future.done():
        future.set_exception(redis.TimeoutError("Redis did not answer in time"))
        transport.close()


_pipelined: dict[tuple[int, str], PipelinedRedis] = {}


def pipelined_client(url: str) -> PipelinedRedis:
    """One PipelinedRedis per event loop and URL."""
    key = (id(asyncio.get_running_loop()), url)
    client = _pipelined.get(key)
    if client is None:
        client = _pipelined[key] = PipelinedRedis(url)
    return client
