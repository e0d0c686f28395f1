"""The ASGI edge (sparkpanel/edge.py, sparkpanel/httpserver.py) under a real uvicorn.

Bodies over the limit are refused with 413 before they are read: by Content-Length at
once, a streamed (chunked) body as soon as it passes the limit, with nothing spooled to
disk and no memory growth. A request head trickled a byte a second, or never sent, is cut
off; so is a body that stalls. Django's own parse limits answer 413/400, not 500.

The server runs with the uvicorn flags of tools/devrun.py (checked to be the ones
tools/container-start.sh uses) and short timeouts, so the slow-client tests take seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.test import Client

from tests.conftest import PASSWORD, ROOT, child_env, manage
from tests.security.servers import devrun, web_server

LIMIT = 2_621_440  # REQUEST_BODY_MAX_BYTES' default
HEADER_TIMEOUT = 2  # HTTP_HEADER_TIMEOUT for the test server (default 10)
BODY_TIMEOUT = 3  # REQUEST_BODY_TIMEOUT for the test server (default 60)
CHUNK = 64 * 1024


def _devrun_limits() -> list[str]:
    return list(devrun().UVICORN_LIMITS)


def _container_argv() -> list[str]:
    script = (ROOT / "tools/container-start.sh").read_text().replace("\\\n", " ")
    [line] = [ln for ln in script.splitlines() if "exec uvicorn" in ln]
    return shlex.split(line.strip())


def test_every_uvicorn_command_line_carries_the_connection_limits():
    limits = _devrun_limits()
    assert "sparkpanel.httpserver:HttpToolsBoundedProtocol" in limits
    for flag in ("--h11-max-incomplete-event-size", "--timeout-keep-alive", "--limit-concurrency"):
        assert flag in limits
    container = _container_argv()
    pairs = list(zip(limits[::2], limits[1::2], strict=True))
    missing = [p for p in pairs if not any(container[i : i + 2] == list(p) for i in range(len(container)))]  # fmt: skip
    assert not missing, f"tools/container-start.sh lacks {missing}"


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, spool: Path, log: Path):
        self.proc, self.port, self.spool, self.log = proc, port, spool, log
        self.url = f"http://127.0.0.1:{port}"

    def spooled_files(self) -> list[str]:
        """Files the server has open in its temporary directory (deleted ones included:
        a spooled upload is unlinked at once, so the directory listing would stay empty)."""
        found = []
        fd_dir = Path(f"/proc/{self.proc.pid}/fd")
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                target = os.readlink(fd_dir / fd)
                if target.startswith(str(self.spool)):
                    found.append(target)
        return found + [str(p) for p in self.spool.iterdir()]

    def peak_rss(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status)[1]) * 1024

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)


@pytest.fixture(scope="module")
def server(redis_url, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("edge")
    spool = tmp / "spool"
    spool.mkdir()
    env = child_env(
        DATABASE_URL=f"sqlite:///{tmp / 'edge.sqlite3'}",
        DEBUG="false",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SPARKPANEL_VAR_DIR=str(tmp),
        TMPDIR=str(spool),  # where Django would spool a body (tempfile's directory)
        HTTP_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        REQUEST_BODY_TIMEOUT=str(BODY_TIMEOUT),
    )
    manage("migrate", "--noinput", env=env)
    manage("createuser", "mia", "--role", "member", "--password-stdin", env=env,
           stdin=PASSWORD + "\n")  # fmt: skip
    log = tmp / "server.log"
    env.pop("FORWARDED_ALLOW_IPS", None)  # make run without a proxy: --no-proxy-headers
    with web_server(env, log) as (proc, port):
        yield Server(proc, port, spool, log)


def _read_response(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection (or `timeout` passes)."""
    sock.settimeout(timeout)
    data = b""
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data:
                head, _, rest = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                if length and len(rest) >= int(length[1]):
                    break
    return data


def _status(response: bytes) -> int | None:
    match = re.match(rb"HTTP/1\.1 (\d{3})", response)
    return int(match[1]) if match else None


@pytest.mark.parametrize("path", ["/healthz", "/api/v1/recipes/import", "/accounts/login/"])
def test_a_declared_oversized_body_is_refused_before_it_is_sent(server, path):
    """Content-Length of 1 GiB, anonymous, no body sent: the 413 comes back at once."""
    with server.connect() as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {1 << 30}\r\n\r\n".encode()
        )
        response = _read_response(sock, timeout=15)
    assert _status(response) == 413, response[:300]
    assert b"connection: close" in response.lower()
    body = response.partition(b"\r\n\r\n")[2]
    if path.startswith("/api/"):
        error = json.loads(body)["error"]
        assert error["code"] == "too_large" and "2.6 MB" in error["message"]
    else:
        assert b"larger than 2.6 MB" in body
    assert server.spooled_files() == []


def test_a_streamed_body_is_cut_off_at_the_limit_off_disk_and_out_of_memory(server):
    """A chunked body without Content-Length (up to 256 MiB offered): the 413 arrives while
    the client is still sending, a few MiB in; nothing lands in the temp dir, and the
    server's peak memory does not grow with what was offered."""
    offered = 256 << 20
    peak_before = server.peak_rss()
    chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
    sent = 0
    response = b""
    spooled: list[str] = []
    with server.connect() as sock:
        sock.sendall(
            b"POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n"
        )
        sock.setblocking(False)
        pending = b""
        while sent < offered:
            readable, writable, _ = select.select([sock], [sock], [], 10)
            if readable:
                break  # the server answered before the body was in
            if not writable:
                continue
            pending = pending or chunk
            try:
                n = sock.send(pending)
            except (BrokenPipeError, ConnectionResetError):
                break
            pending = pending[n:]
            sent += n
            if sent % (1 << 20) < n:  # every MiB: has the server started spooling?
                spooled = server.spooled_files()
                if spooled:
                    break
        sock.setblocking(True)
        response = _read_response(sock, timeout=15)
    assert not spooled, f"the body was spooled to disk: {spooled}"
    assert _status(response) == 413, (sent, response[:300])
    assert sent < 64 << 20, f"the 413 came only after {sent} bytes"
    assert server.spooled_files() == []
    growth = server.peak_rss() - peak_before
    assert growth < 32 << 20, f"the server's peak memory grew by {growth} bytes"
    assert httpx.get(server.url + "/healthz", timeout=10).status_code in (200, 503)


def test_the_upload_views_take_larger_bodies_up_to_their_own_limit(server):
    """The YAML import takes a body over the general limit (its 1 MB file and pasted text
    are checked by the form); over UPLOAD_BODY_MAX_BYTES it is refused too."""
    files = {"file": ("big.yaml", b"a: 1\n" * (700_000))}  # 3.5 MB
    with httpx.Client(base_url=server.url, timeout=30) as client:
        ok = client.post("/recipes/import/", files=files)
        assert ok.status_code != 413, ok.text[:300]  # the CSRF or login check answers
        big = {"file": ("big.yaml", b"a: 1\n" * (2_000_000))}  # 10 MB
        assert client.post("/recipes/import/", files=big).status_code == 413
        assert client.post("/healthz", files=files).status_code == 413


def test_a_request_head_sent_a_byte_a_second_is_cut_off(server):
    """Slowloris: the head never completes, one byte a second; uvicorn alone keeps such a
    connection for as long as the client likes."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 100
    started = time.monotonic()
    closed_after = None
    with server.connect() as sock:
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
                break
            readable, _, _ = select.select([sock], [], [], 1.0)
            if readable:
                with contextlib.suppress(ConnectionResetError):
                    if sock.recv(1024) == b"":
                        closed_after = time.monotonic() - started
                        break
    # The timeout is 2 s; the head would take over 140 s. Generous for a busy machine.
    assert closed_after is not None and closed_after < 30, closed_after
    assert "no complete request head" in server.log.read_text()


def test_a_connection_that_sends_nothing_is_closed(server):
    with server.connect() as sock:
        started = time.monotonic()
        sock.settimeout(30)
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1024) == b""
    assert time.monotonic() - started < 25


def test_an_oversized_request_head_is_refused(server):
    with server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 40_000)
        sock.sendall(b"\r\n\r\n")
        response = _read_response(sock, timeout=15)
    assert _status(response) == 431, response[:200]


def test_an_oversized_request_head_that_arrives_in_one_piece_is_refused(server):
    """httptools would parse a whole 20 KB head from one read; the parsed fields count."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(20))
    with server.connect() as sock:
        sock.sendall(head + b"\r\n")
        response = _read_response(sock, timeout=15)
    assert _status(response) == 431, response[:200]
    # A head under the bound on the same server is served.
    with server.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 8000
                     + b"\r\nConnection: close\r\n\r\n")  # fmt: skip
        response = _read_response(sock, timeout=15)
    assert _status(response) == 200, response[:200]


def test_a_stalled_body_is_answered_408(server):
    with server.connect() as sock:
        sock.sendall(
            b"POST /api/v1/recipes/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"yaml": '
        )
        started = time.monotonic()
        response = _read_response(sock, timeout=30)
    assert _status(response) == 408, response[:300]
    assert json.loads(response.partition(b"\r\n\r\n")[2])["error"]["code"] == "timeout"
    assert time.monotonic() - started < 25


def _session_cookie(server) -> str:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.get("/accounts/login/")
        token = client.cookies["csrftoken"]
        client.post("/accounts/login/", data={"username": "mia", "password": PASSWORD,
                                              "csrfmiddlewaretoken": token})  # fmt: skip
        return client.cookies["sessionid"]


def test_sockets_through_the_bounded_server(server):
    """The protocol class upgrades sockets: the panel's own origin opens one that outlives
    the head deadline; another port of the same host and an unknown path are refused, the
    latter with one log line and no traceback."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    ws_url = f"ws://127.0.0.1:{server.port}"
    cookie = {"Cookie": f"sessionid={_session_cookie(server)}"}
    with connect(ws_url + "/ws/events/", origin=server.url, additional_headers=cookie,
                 open_timeout=15) as ws:  # fmt: skip
        time.sleep(HEADER_TIMEOUT * 2)
        ws.ping().wait(10)  # still open: the head deadline ended with the upgrade
    foreign = f"http://127.0.0.1:{server.port + 1}"
    for path, origin in (("/ws/events/", foreign), ("/ws/nope/", server.url)):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url + path, origin=origin, additional_headers=cookie, open_timeout=15)
        assert refused.value.response.status_code == 403
    log = server.log.read_text()
    assert "Closed a WebSocket to /ws/nope/: no such socket" in log
    assert "Traceback" not in log


# --- Django's own limits: 413/400 in one place, not 500 ------------------------------------


@pytest.fixture
def quiet_tracebacks(caplog):
    """Fails the test if anything logged a traceback."""
    with caplog.at_level("INFO"):
        yield caplog
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.django_db
def test_an_api_body_over_djangos_limit_is_a_413_in_the_api_shape(
    operator, api_as, settings, quiet_tracebacks
):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api_as(operator).post("/recipes/import", {"yaml": "a: 1\n" * 5000})
    assert response.status_code == 413, response.content[:300]
    assert response.json()["error"]["code"] == "too_large"


@pytest.mark.django_db
def test_too_many_form_fields_is_a_400_not_a_traceback(operator, quiet_tracebacks):
    client = Client()
    client.force_login(operator)
    fields = {f"f{i}": "x" for i in range(1500)}
    response = client.post("/recipes/import/", fields)
    assert response.status_code == 400
    assert b"More than 1000 form fields" in response.content


@pytest.mark.django_db
def test_a_form_over_djangos_limit_is_a_413(operator, settings, quiet_tracebacks):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    client = Client()
    client.force_login(operator)
    response = client.post("/recipes/import/", {"text": "a: 1\n" * 5000})
    assert response.status_code == 413


@pytest.mark.django_db
def test_a_broken_multipart_body_is_a_400(operator, quiet_tracebacks):
    client = Client()
    client.force_login(operator)
    response = client.generic(
        "POST", "/recipes/import/", b"--x\r\nnot a part",
        content_type="multipart/form-data; boundary=",
    )  # fmt: skip
    assert response.status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize(("size", "status"), [(2_500_000, 422), (3_000_000, 413)])
def test_a_json_body_of_a_few_megabytes_is_a_4xx_never_a_500(
    operator, api_as, size, status, quiet_tracebacks
):
    """The probe's 2.5 MB JSON body (a 500 before): under the limit the API reads it and
    answers for its content (the YAML is over 1 MB); over the limit, 413."""
    response = api_as(operator).post("/recipes/import", {"yaml": "a" * size})
    assert response.status_code == status, response.content[:300]
