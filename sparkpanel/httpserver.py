"""uvicorn's HTTP protocol with bounds on what one client can make the server hold.

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

**An answer given before the body is in ends the connection.** uvicorn keeps a connection
alive after any answer and goes on reading the request's body; a client that trickles a
body after a 401 held its connection for ever (each byte stops the keep-alive timer). Here
keep-alive is off for a request until its whole body has arrived: an answer that starts
earlier (the gateway's 401/404/413/408, `sparkpanel.edge.BodyLimit`'s 413/408, uvicorn's
own 503) carries `connection: close`, and the connection ends after it; the rest of the
body is never parsed or passed on. It ends with a *lingering* close (RFC 9112, 9.6): the
answer and a FIN go out at once, what the client still sends is dropped for at most
LINGER_S seconds (and LINGER_MAX_BYTES), then the socket is closed. Closing a socket with
unread data at once sends a reset, which can destroy the answer before the client has
read it.

**Per-address caps.** uvicorn's `--limit-concurrency` (512) counts every connection of the
server, so one address that holds 512 connections (trickled heads or bodies) makes every
page a 503. A client address may hold at most HTTP_CONNECTIONS_PER_ADDRESS connections
(default 256, half the server), and at most HTTP_UNAUTHENTICATED_PER_ADDRESS (default 64)
that have not yet carried credentials the panel accepted; a connection over either cap is
answered 429 (`connection: close`) and closed at once, before anything of it is read, and
the refusals are one log line per address a minute. A connection counts as unauthenticated
from its start until the application marks it (below); every connection starts that way,
so the unauthenticated cap also bounds how many connections one address may open at once.
The defaults hold a team behind one NAT address: a browser opens at most 6 connections
(static files too, which nothing marks), so 64 are ten browsers loading pages in the same
few seconds, or a gateway benchmark at 64 concurrent streams starting together; an
attacker from one address holds 64 of the 512, the rest stay for everyone else.

Addresses are counted as the server sees them (the socket's peer, before any forwarding
header): behind a reverse proxy every client shares the proxy's address, so the addresses
uvicorn trusts as proxies (`--forwarded-allow-ips`, FORWARDED_ALLOW_IPS) are exempt, and the
proxy carries the limit (docs/deploy.md); so are 127.0.0.1 and ::1 (the machine itself: a
healthcheck, a proxy beside the panel). HTTP_PER_ADDRESS_EXEMPT (addresses or networks,
comma-separated; `none` for none; unset or empty: that default) replaces that list. IPv6
addresses count by their /64 (one subscriber's usual share); an IPv4-mapped IPv6 address
counts as its IPv4 address. WebSockets leave the table when the upgrade happens (each
socket's consumer refuses an anonymous one at once), and the table is per process (per
uvicorn worker).

The mark: every HTTP scope carries `scope["extensions"]["sparkpanel.connection"]`, an
object with `authenticated` (bool) and `mark_authenticated()` (callable from any thread).
The application calls it when a request on the connection carried credentials it accepted:
`sparkpanel.edge.SignedInConnections` (Django: a signed-in session or an API token) and
`sparkpanel.asgi.HttpRouter` (the gateway answers 2xx only to a key it admitted). From
then on the connection counts only against HTTP_CONNECTIONS_PER_ADDRESS.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.utils import get_remote_addr

from sparkpanel.env import env_int

HEADER_TIMEOUT = env_int("HTTP_HEADER_TIMEOUT", 10)
HEADER_MAX_BYTES = 16 * 1024  # when uvicorn is not given --h11-max-incomplete-event-size
CONNECTIONS_PER_ADDRESS = env_int("HTTP_CONNECTIONS_PER_ADDRESS", 256)
UNAUTHENTICATED_PER_ADDRESS = env_int("HTTP_UNAUTHENTICATED_PER_ADDRESS", 64)
EXEMPT_VARIABLE = "HTTP_PER_ADDRESS_EXEMPT"
DEFAULT_EXEMPT = "127.0.0.1,::1"  # with the trusted proxies, when the variable is unset
LINGER_S = 2.0  # after an early answer: how long what the client still sends is dropped
LINGER_MAX_BYTES = 256 * 1024
REFUSAL_LOG_INTERVAL_S = 60.0
CONNECTION_EXTENSION = "sparkpanel.connection"
RETRY_AFTER_S = 5

log = logging.getLogger("uvicorn.error")

Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def parse_networks(entries: str | list[str] | tuple[str, ...] | None) -> Networks:
    """Addresses and networks from a comma-separated string or a list, as uvicorn reads
    `--forwarded-allow-ips`; what is not an address (a host name, `*`) is left out."""
    if entries is None:
        return ()
    if isinstance(entries, str):
        entries = entries.split(",")
    networks = []
    for entry in entries:
        entry = entry.strip()
        if not entry or entry == "*":  # the panel refuses `*` (sparkpanel/settings.py)
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            continue
    return tuple(networks)


def address_key(host: str, exempt: Networks) -> str | None:
    """What the per-address caps count a peer address as, or None when it is not capped
    (exempt, or not an IP address: a Unix socket)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in exempt):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class ConnectionMark:
    """`scope["extensions"]["sparkpanel.connection"]`: see the module's text."""

    __slots__ = ("_protocol", "authenticated")

    def __init__(self, protocol: HttpToolsBoundedProtocol):
        self._protocol: HttpToolsBoundedProtocol | None = protocol
        self.authenticated = False

    def mark_authenticated(self) -> None:
        """A request on this connection carried credentials the application accepted. Safe
        from any thread (Django's sync views run in one); the count changes on the loop."""
        if self.authenticated:
            return
        self.authenticated = True
        protocol = self._protocol
        if protocol is not None:
            # A closed loop: the connection is gone anyway.
            with contextlib.suppress(RuntimeError):
                protocol.loop.call_soon_threadsafe(protocol._on_authenticated)


class _ResponseTransport:
    """What uvicorn's request cycle sees as the transport: the real one's `write` and
    `is_closing`, and a `close` that lingers when the body is still coming."""

    __slots__ = ("close", "is_closing", "write")

    def __init__(self, transport: asyncio.Transport, close) -> None:
        self.write, self.is_closing, self.close = transport.write, transport.is_closing, close


class _RefusalLog:
    """One log line per refused address per interval: the first refusal at once, then the
    number refused since, once an interval while refusals go on (and once after)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[int, str]] = {}
        self.quiet: set[str] = set()

    def refused(self, loop: asyncio.AbstractEventLoop, key: str, why: str) -> None:
        if key in self.quiet:
            count, _ = self.pending.get(key, (0, why))
            self.pending[key] = (count + 1, why)
            return
        log.warning(
            "Refusing connections from %s: %s; answered 429 (further refusals from this "
            "address are counted and logged once a minute)", key, why,
        )  # fmt: skip
        self._quiet(loop, key)

    def _quiet(self, loop: asyncio.AbstractEventLoop, key: str) -> None:
        self.quiet.add(key)
        loop.call_later(REFUSAL_LOG_INTERVAL_S, self._flush, loop, key)

    def _flush(self, loop: asyncio.AbstractEventLoop, key: str) -> None:
        count, why = self.pending.pop(key, (0, ""))
        if not count:
            self.quiet.discard(key)
            return
        log.warning("Refused %d more connections from %s in the last %d s: %s", count, key,
                    REFUSAL_LOG_INTERVAL_S, why)  # fmt: skip
        self._quiet(loop, key)


class HttpToolsBoundedProtocol(HttpToolsProtocol):
    """httptools with a head deadline, a head size bound, early answers that close, and
    per-address caps (see the module's text).

    Two counts bound the head: the bytes received while a head is still incomplete (a
    trickled or endless head is cut off before it is parsed to the end), and the parsed
    request line and header fields of a complete head (a whole head that arrived in one
    read is measured too)."""

    header_timeout: float = HEADER_TIMEOUT
    connections_per_address: int = CONNECTIONS_PER_ADDRESS
    unauthenticated_per_address: int = UNAUTHENTICATED_PER_ADDRESS
    _head_deadline: asyncio.TimerHandle | None = None
    _in_head = True  # between a request's first byte (or the connection's start) and its head
    _head_bytes = 0  # received while the head is incomplete
    _head_fields = 0  # request target + header fields parsed so far
    _refused = False
    _shutting_down = False
    _lingering: asyncio.TimerHandle | None = None  # after an early answer, until the close
    _lingered_bytes = 0
    _address: str | None = None  # the key this connection is counted under, while it is
    _unauthenticated = False  # counted against the unauthenticated cap
    _mark: ConnectionMark | None = None

    # Per process (one event loop each): open and unauthenticated connections per address.
    open_by_address: ClassVar[dict[str, int]] = {}
    unauthenticated_by_address: ClassVar[dict[str, int]] = {}
    _exempt: ClassVar[dict[str, Networks]] = {}
    _refusals: ClassVar[_RefusalLog] = _RefusalLog()

    # --- the connection -------------------------------------------------------------------
    def connection_made(self, transport) -> None:  # type: ignore[override]
        peer = get_remote_addr(transport)
        key = address_key(peer[0], self._exempt_networks()) if peer else None
        if key is not None:
            why = self._over_cap(key)
            if why is not None:
                self._refuse_connection(transport, key, why)
                return
            self._count(key)
        super().connection_made(transport)
        self._mark = ConnectionMark(self)
        self._response_transport = _ResponseTransport(transport, self._close_after_response)
        self.head_max_bytes = self.config.h11_max_incomplete_event_size or HEADER_MAX_BYTES
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._lingering is not None:
            self._lingered_bytes += len(data)
            if self._lingered_bytes > LINGER_MAX_BYTES:
                self.transport.close()
            return  # dropped: the answer has gone, the connection is ending
        if self._in_head:
            if self._head_deadline is None and self._idle():
                self._arm_head_deadline()  # the first byte of the next request
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.head_max_bytes:
            self._refuse_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        if self._lingering is not None:
            self._lingering.cancel()
        self._release()
        if self._mark is not None:
            self._mark._protocol = None
        super().connection_lost(exc)

    def shutdown(self) -> None:
        self._shutting_down = True  # no keep-alive comes back once a body is in
        super().shutdown()

    def handle_websocket_upgrade(self) -> None:
        self._release()  # the socket's consumer decides; it leaves this table
        super().handle_websocket_upgrade()

    # --- parser callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._head_fields = 0
        super().on_message_begin()
        self.scope.setdefault("extensions", {})[CONNECTION_EXTENSION] = self._mark  # type: ignore[index]

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
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not before:  # a request for the application (not a WebSocket upgrade)
            cycle.transport = self._response_transport  # type: ignore[assignment]
            # No keep-alive until the body is in (on_message_complete gives it back): an
            # answer that starts before then says `connection: close` and ends it.
            cycle.keep_alive_after_body = cycle.keep_alive  # type: ignore[attr-defined]
            cycle.keep_alive = False

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_started:
            wanted = getattr(cycle, "keep_alive_after_body", cycle.keep_alive)
            cycle.keep_alive = wanted and not self._shutting_down
        super().on_message_complete()
        self._in_head = True  # what follows is the next request's head

    def on_response_complete(self) -> None:
        if self._lingering is not None:
            self.server_state.total_requests += 1
            return  # no keep-alive timer, no next request: the connection is ending
        super().on_response_complete()

    # --- early answers: a lingering close ----------------------------------------------------
    def _close_after_response(self) -> None:
        """uvicorn closes after an answer without keep-alive. When the request's body is
        still coming, the answer is followed by a FIN at once and the socket is closed once
        the client stops sending (its EOF), or after LINGER_S seconds or LINGER_MAX_BYTES."""
        transport = self.transport
        if transport.is_closing() or self._lingering is not None:
            return
        cycle = self.cycle
        if cycle is None or not cycle.more_body or not transport.can_write_eof():
            transport.close()
            return
        self._disarm_head_deadline()
        self._in_head = False
        self._lingering = self.loop.call_later(LINGER_S, self._linger_over)
        transport.write_eof()  # after what is buffered: the answer
        self.flow.resume_reading()  # read (and drop) rather than leave it unread

    def _linger_over(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    # --- per-address caps -----------------------------------------------------------------
    def _exempt_networks(self) -> Networks:
        text = os.environ.get(EXEMPT_VARIABLE, "").strip()
        if text.lower() == "none":
            text = ""
        elif not text:  # the proxies uvicorn trusts, and the machine itself
            trusted = self.config.forwarded_allow_ips
            trusted = trusted if isinstance(trusted, str) else ",".join(trusted or ())
            text = f"{trusted},{DEFAULT_EXEMPT}"
        networks = self._exempt.get(text)
        if networks is None:
            networks = self._exempt[text] = parse_networks(text)
        return networks

    def _over_cap(self, key: str) -> str | None:
        cap = self.connections_per_address
        if cap > 0 and self.open_by_address.get(key, 0) >= cap:
            return f"it holds {cap} open connections (HTTP_CONNECTIONS_PER_ADDRESS)"
        cap = self.unauthenticated_per_address
        if cap > 0 and self.unauthenticated_by_address.get(key, 0) >= cap:
            return (f"it holds {cap} connections that have not signed in "
                    "(HTTP_UNAUTHENTICATED_PER_ADDRESS)")  # fmt: skip
        return None

    def _count(self, key: str) -> None:
        self._address, self._unauthenticated = key, True
        self.open_by_address[key] = self.open_by_address.get(key, 0) + 1
        self.unauthenticated_by_address[key] = self.unauthenticated_by_address.get(key, 0) + 1

    def _on_authenticated(self) -> None:
        """The application accepted credentials on this connection (ConnectionMark)."""
        if self._address is not None and self._unauthenticated:
            self._unauthenticated = False
            _decrement(self.unauthenticated_by_address, self._address)

    def _release(self) -> None:
        key, self._address = self._address, None
        if key is None:
            return
        _decrement(self.open_by_address, key)
        if self._unauthenticated:
            self._unauthenticated = False
            _decrement(self.unauthenticated_by_address, key)

    def _refuse_connection(self, transport, key: str, why: str) -> None:
        self.transport, self._refused = transport, True
        self._refusals.refused(self.loop, key, why)
        _answer_and_close(
            transport, 429, b"Too many connections from your address; try again in a few "
            b"seconds.\n", b"retry-after: %d\r\n" % RETRY_AFTER_S,
        )  # fmt: skip

    # --- the head -------------------------------------------------------------------------
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
        _answer_and_close(self.transport, 431, b"Request header fields too large")


def _answer_and_close(transport, status: int, message: bytes, headers: bytes = b"") -> None:
    """A plain-text answer the protocol writes itself (the application never saw the
    request), then the connection's end."""
    transport.write(
        STATUS_LINE[status] + b"content-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\n%sconnection: close\r\n\r\n%s" % (len(message), headers, message)
    )  # fmt: skip
    transport.close()


def _decrement(table: dict[str, int], key: str) -> None:
    left = table.get(key, 0) - 1
    if left > 0:
        table[key] = left
    else:
        table.pop(key, None)
