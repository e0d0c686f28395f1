"""One address cannot take the web server (issue 38, item 3): a real uvicorn started with
tools/devrun.py's flags, real sockets from this process.

The probe: 520 connections from one address to `/v1/chat/completions` (no key, or a
too-large Content-Length, or a key-shaped key the gateway has to read a body for), each
trickling a byte a second, plus partial request heads re-opened as soon as they are cut
off. Before, the gateway's 401 left the connection open and the server kept reading the
trickled body; 512 such connections filled uvicorn's `--limit-concurrency` and every page,
API call and socket was a 503 for as long as they stayed. Now an early refusal closes the
connection (`Connection: close`, a FIN right after the answer, the rest of the body never
read) and the protocol refuses an address's connections past its caps
(sparkpanel/httpserver.py): the flood holds at most `HTTP_UNAUTHENTICATED_PER_ADDRESS`
connections, and a signed-in user elsewhere is served as before.

127.0.0.2 (the user) and 127.0.0.3 (the flood) are loopback addresses of their own; the
server trusts 127.0.0.1 only as a proxy (FORWARDED_ALLOW_IPS), so neither is exempt.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PASSWORD, child_env, manage
from tests.security.servers import web_server
from tests.security.test_edge import _read_response, _status

USER = "127.0.0.2"
FLOOD = "127.0.0.3"
UNAUTHENTICATED_CAP = 64  # HTTP_UNAUTHENTICATED_PER_ADDRESS' default
BODY_TIMEOUT = 4  # REQUEST_BODY_TIMEOUT for the test server (default 60)
HEADER_TIMEOUT = 20  # HTTP_HEADER_TIMEOUT (default 10): partial heads held through a test
TRICKLING = 520  # the probe's trickled bodies
PARTIAL_HEADS = 80  # and partial heads on top, re-opened when cut off
# The shape of a key: the gateway reads the body before it looks the key up.
FAKE_KEY = "spg_" + "x" * 40


class Server:
    gateway_key = ""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc, self.port, self.log = proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def connect(self, source: str = USER) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30,
                                        source_address=(source, 0))  # fmt: skip

    def client(self, **kwargs) -> httpx.Client:
        """An HTTP client from the user's address, on a connection of its own."""
        transport = httpx.HTTPTransport(local_address=USER)
        return httpx.Client(base_url=self.url, transport=transport, timeout=30, **kwargs)

    def established_from(self, address: str) -> int:
        """The server's established connections from `address` (the kernel's table)."""
        local = f"0100007F:{self.port:04X}"
        remote = "".join(f"{int(p):02X}" for p in reversed(address.split(".")))
        count = 0
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == local and fields[2].startswith(remote + ":") and fields[3] == "01":
                count += 1
        return count


@pytest.fixture(scope="module")
def server(redis_url, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("caps")
    env = child_env(
        DATABASE_URL=f"sqlite:///{tmp / 'caps.sqlite3'}",
        DEBUG="false",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SPARKPANEL_VAR_DIR=str(tmp),
        REQUEST_BODY_TIMEOUT=str(BODY_TIMEOUT),
        HTTP_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        FORWARDED_ALLOW_IPS="127.0.0.1",
    )
    for name in ("HTTP_CONNECTIONS_PER_ADDRESS",
                 "HTTP_UNAUTHENTICATED_PER_ADDRESS", "HTTP_PER_ADDRESS_EXEMPT"):  # fmt: skip
        env.pop(name, None)  # the defaults
    manage("migrate", "--noinput", env=env)
    manage("createuser", "mia", "--role", "member", "--password-stdin", env=env,
           stdin=PASSWORD + "\n")  # fmt: skip
    make_key = ("from django.contrib.auth import get_user_model; "
                "from apps.gateway.keys import key_create; "
                "print(key_create(user=get_user_model().objects.get(username='mia'), "
                "name='caps')[1])")  # fmt: skip
    key = manage("shell", "-c", make_key, env=env).strip().splitlines()[-1]
    log = tmp / "server.log"
    # make run's vector, with its proxy flags for FORWARDED_ALLOW_IPS=127.0.0.1.
    with web_server(env, log) as (proc, port):
        srv = Server(proc, port, log)
        srv.gateway_key = key
        yield srv


@pytest.fixture(scope="module")
def session_cookie(server) -> str:
    with server.client() as client:
        client.get("/accounts/login/")
        token = client.cookies["csrftoken"]
        client.post("/accounts/login/", data={"username": "mia", "password": PASSWORD,
                                              "csrfmiddlewaretoken": token})  # fmt: skip
        return client.cookies["sessionid"]


def _head(path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             f"Content-Length: {length}", *extra]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _says_close(response: bytes) -> bool:
    head = response.partition(b"\r\n\r\n")[0].lower() + b"\r\n"
    return b"\r\nconnection: close\r\n" in head


def _answer_while_trickling(sock: socket.socket, within: float) -> bytes:
    """The server's answer (head and Content-Length body), a byte of the request's body
    sent every 0.5 s while it is awaited."""
    sock.setblocking(False)
    started, response = time.monotonic(), b""
    while time.monotonic() - started < within:
        head, sep, body = response.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        if sep and length and len(body) >= int(length[1]):
            break
        readable, _, _ = select.select([sock], [], [], 0.5)
        if not readable:
            sock.send(b" ")
        elif chunk := sock.recv(65536):
            response += chunk
        else:
            break
    return response


def _closed_while_trickling(sock: socket.socket, within: float) -> float | None:
    """Sends a byte every 0.5 s (the rest of a body) and watches for the server's end of the
    connection: the seconds until EOF (or a reset), None if it stayed open `within` s."""
    started = time.monotonic()
    sock.setblocking(False)
    while (elapsed := time.monotonic() - started) < within:
        readable, _, _ = select.select([sock], [], [], 0.5)
        try:
            if readable and sock.recv(65536) == b"":
                return elapsed
            sock.send(b" ")
        except (BrokenPipeError, ConnectionResetError):
            return elapsed
        except BlockingIOError:
            pass
    return None


def _refused_while_trickling(sock: socket.socket, within: float) -> float | None:
    """After the server's FIN: sends a byte every 0.25 s until the server's kernel refuses
    them (the socket is closed for good: a reset, then a broken pipe); the seconds that
    took, None if the server still took bytes after `within` s."""
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < within:
        try:
            sock.send(b" ")
        except (BrokenPipeError, ConnectionResetError):
            return elapsed
        except BlockingIOError:
            pass
        time.sleep(0.25)
    return None


EARLY = {
    "gateway-no-key": (_head("/v1/chat/completions", 4096), 401),
    "gateway-no-key-huge-body": (_head("/v1/chat/completions", 1 << 30), 401),
    # A key of the right shape that is no key: refused before its body (the key is checked
    # as soon as the body does not come with the head), not at the body deadline.
    "gateway-unknown-key": (
        _head("/v1/chat/completions", 4096, f"Authorization: Bearer {FAKE_KEY}"),
        401,
    ),
    "gateway-unknown-path": (_head("/v1/nope", 4096), 404),
    "django-huge-body": (_head("/api/v1/recipes/import", 1 << 30), 413),
}


@pytest.mark.parametrize("case", EARLY)
def test_an_early_refusal_closes_the_connection_without_reading_the_body(server, case):
    """The answer comes while the body is still being sent; it says `Connection: close` and
    the server ends the connection right after it (the client reads EOF), although the client
    keeps sending; a couple of seconds later (the lingering close) the server's socket is gone
    and the client's bytes are refused. Before, the gateway's 401 kept the connection open:
    every trickled byte stopped the keep-alive timer."""
    head, status = EARLY[case]
    with server.connect() as sock:
        sock.sendall(head + b'{"model": ')
        response = _read_response(sock, timeout=15)
        closed_after = _closed_while_trickling(sock, within=4)
        gone_after = _refused_while_trickling(sock, within=15) if closed_after is not None else None
    assert _status(response) == status, response[:300]
    assert closed_after is not None, "the server kept reading the body after its answer"
    assert gone_after is not None, "the server still took the client's bytes 15 s after its FIN"
    assert _says_close(response), response[:300]


TRICKLED = {
    "gateway": ("/v1/chat/completions", "Authorization: Bearer {key}", "timeout"),
    "django": ("/api/v1/recipes/import", "Cookie: sessionid={cookie}", "timeout"),
}


@pytest.mark.parametrize("case", TRICKLED)
def test_a_trickled_body_is_cut_off_at_the_body_deadline_and_the_connection_closed(
    server, session_cookie, case
):
    """A byte every half second of a 100 kB body, past REQUEST_BODY_TIMEOUT (4 s here): a
    408 at the deadline (not at the end of the body, ~14 hours away), then the connection
    ends although the client keeps sending."""
    path, credentials, code = TRICKLED[case]
    head = _head(path, 100_000, credentials.format(cookie=session_cookie, key=server.gateway_key))
    with server.connect() as sock:
        sock.sendall(head + b"{")
        started = time.monotonic()
        response = _answer_while_trickling(sock, within=BODY_TIMEOUT + 20)
        answered_after = time.monotonic() - started
        closed_after = _closed_while_trickling(sock, within=4)
    assert _status(response) == 408, response[:300]
    assert code.encode() in response.partition(b"\r\n\r\n")[2]
    assert BODY_TIMEOUT - 0.5 <= answered_after < BODY_TIMEOUT + 15, answered_after
    assert closed_after is not None, "the server kept reading the body after its 408"
    assert _says_close(response), response[:300]


def test_signed_in_connections_leave_the_unauthenticated_cap_to_others(server, session_cookie):
    """From one address: 64 connections that each got an answer as signed in (a session's
    request, or the gateway's model list for a key), held open by the next request's head,
    do not count against the unauthenticated cap; 64 connections that sent only a partial
    head are then still let in, and the next is refused with 429 and closed at once."""
    address = "127.0.0.4"
    requests = [
        f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: sessionid={session_cookie}\r\n\r\n",
        f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.gateway_key}\r\n\r\n",
    ]
    partial = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    held: list[socket.socket] = []
    try:
        for i in range(UNAUTHENTICATED_CAP):
            sock = server.connect(address)
            held.append(sock)
            sock.sendall(requests[i % 2].encode())
            response = _read_response(sock, timeout=15)
            assert _status(response) == 200, (i, response[:300])
            sock.sendall(partial)  # the next request, never finished: the connection stays
        anonymous = []
        for _ in range(UNAUTHENTICATED_CAP):
            sock = server.connect(address)
            held.append(sock)
            anonymous.append(sock)
            sock.sendall(partial)
        answered, _, _ = select.select(anonymous, [], [], 1.0)
        assert not answered, [sock.recv(300) for sock in answered]
        with server.connect(address) as extra:
            extra.sendall(partial)
            refused = _read_response(extra, timeout=10)
            assert _status(refused) == 429, refused[:300]
            assert _says_close(refused)
            extra.settimeout(5)
            # Closed at once, the head unread: an EOF, or a reset for the unread head.
            with contextlib.suppress(ConnectionResetError):
                assert extra.recv(100) == b""
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),  # IPv4-mapped: the IPv4 address
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),  # IPv6: its /64
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("127.0.0.1", None),  # the machine itself
        ("::1", None),
        ("172.18.0.1", None),  # a trusted proxy (FORWARDED_ALLOW_IPS)
        ("10.9.8.7", None),  # in a trusted network
        ("/run/panel.sock", None),  # not an IP address: a Unix socket
    ],
)
def test_addresses_are_counted_as_ipv4_or_an_ipv6_64_and_proxies_are_exempt(peer, key):
    from sparkpanel.httpserver import DEFAULT_EXEMPT, address_key, parse_networks

    exempt = parse_networks(f"172.18.0.1, 10.0.0.0/8, *, proxy.lan,{DEFAULT_EXEMPT}")
    assert address_key(peer, exempt) == key


# --- the flood -------------------------------------------------------------------------------

HEADS = {
    "no-key": _head("/v1/chat/completions", 4096) + b'{"model": ',
    "no-key-huge": _head("/v1/chat/completions", 1 << 30) + b'{"model": ',
    "key-shaped-huge": (
        _head("/v1/chat/completions", 1 << 30, f"Authorization: Bearer {FAKE_KEY}") + b'{"model": '
    ),
    "partial-head": b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
}


class Flood:
    """`TRICKLING` trickled bodies and `PARTIAL_HEADS` trickled heads from one address, a
    byte a second each, in a thread; a connection the server ends is opened again at the
    next second (the probe's re-opened partial heads, for every kind)."""

    def __init__(self, port: int):
        kinds = ["no-key", "no-key-huge", "key-shaped-huge"]
        self.kinds = [kinds[i % 3] for i in range(TRICKLING)] + ["partial-head"] * PARTIAL_HEADS
        self.socks: list[socket.socket | None] = [None] * len(self.kinds)
        self.port = port
        self.opened = self.ended = self.rounds = 0
        self.statuses: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        for sock in self.socks:
            if sock is not None:
                sock.close()

    def _open(self, kind: str) -> socket.socket | None:
        sock = socket.socket()
        try:
            sock.bind((FLOOD, 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", self.port))
            sock.sendall(HEADS[kind])
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        self.opened += 1
        return sock

    def _alive(self, sock: socket.socket) -> bool:
        """Reads what the server sent (its answer's status is kept); False once it ended
        the connection, else the connection's next byte is sent."""
        try:
            data = sock.recv(65536)
            if not data:
                return False
            status = _status(data)
            if status is not None:
                self.statuses[status] = self.statuses.get(status, 0) + 1
        except BlockingIOError:
            pass
        except OSError:
            return False
        try:
            sock.send(b"a")
        except BlockingIOError:
            pass
        except OSError:
            return False
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            for i, kind in enumerate(self.kinds):
                if self._stop.is_set():
                    return
                sock = self.socks[i]
                if sock is not None and not self._alive(sock):
                    sock.close()
                    self.socks[i] = sock = None
                    self.ended += 1
                if sock is None:
                    self.socks[i] = self._open(kind)
            self.rounds += 1
            self._stop.wait(1.0)


def _timed_page(server, path: str, cookie: str | None) -> tuple[int, float]:
    """One GET on a new connection from the user's address: its status and seconds."""
    cookies = {"sessionid": cookie} if cookie else None
    started = time.monotonic()
    with server.client(cookies=cookies) as client:
        status = client.get(path).status_code
    return status, time.monotonic() - started


def test_one_address_trickling_520_connections_leaves_the_panel_to_everyone_else(
    server, session_cookie
):
    """While the flood holds its connections, a signed-in user on another address gets the
    dashboard and /healthz at once (before: 503, uvicorn's concurrency limit was full), the
    server holds at most the unauthenticated cap of the flood's connections, and the refusals
    are one log line for the address, not one per connection."""
    pages = [("/", session_cookie), ("/healthz", None)]
    before = [_timed_page(server, path, cookie) for _ in range(3) for path, cookie in pages]
    assert [status for status, _ in before] == [200, 200] * 3, before
    baseline = statistics.median(seconds for _, seconds in before)

    with Flood(server.port) as flood:
        deadline = time.monotonic() + 40
        # Every connection tried 6 times: past the body deadline, refused ones re-opened.
        while flood.rounds < 6 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert flood.rounds >= 6, f"the flood opened only {flood.opened} connections"
        during = [_timed_page(server, path, cookie) for _ in range(3) for path, cookie in pages]
        held = min(server.established_from(FLOOD) for _ in range(3))
        statuses = dict(flood.statuses)

    assert [status for status, _ in during] == [200, 200] * 3, (during, statuses)
    typical = statistics.median(seconds for _, seconds in during)
    assert typical < max(1.0, 3 * baseline), (before, during)
    assert held <= UNAUTHENTICATED_CAP, f"the server holds {held} of the flood's connections"
    assert statuses.get(429) and statuses.get(401), statuses  # the refused ones were told so
    refusals = [
        ln for ln in server.log.read_text().splitlines() if f"connections from {FLOOD}" in ln
    ]
    assert 1 <= len(refusals) <= 3, refusals
