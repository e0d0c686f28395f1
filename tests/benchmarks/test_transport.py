"""The harness's network backend (apps/benchmarks/harness/transport.py): reads dated by
the kernel's receive time (SO_TIMESTAMPNS) rather than by when the event loop got round
to them, and the transport that reads them that way behaving as a transport — writes under
back-pressure, reads paused and resumed, the end of the stream, a refused connection.

The server side is a plain blocking socket in a thread, so the client's event loop can be
held (a blocking sleep inside the coroutine) while the server's bytes arrive."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import httpcore
import pytest
import uvloop

from apps.benchmarks.harness.transport import KERNEL_STAMPS, _AsyncioBackend, _KernelStamped

HELD_S = 1.0  # how long the client's loop is held while the answer arrives

pytestmark = pytest.mark.skipif(not KERNEL_STAMPS, reason="kernel receive stamps are Linux's")


def _loops():
    # the benchmark worker runs the harness on uvloop (a dependency), plain asyncio without it
    return [pytest.param(asyncio.run, id="asyncio"), pytest.param(uvloop.run, id="uvloop")]


class Server:
    """Accepts one connection, reads the request, and answers `answer` (noting when it
    began to send it and when the kernel had taken it); then echoes what else comes until
    the client closes."""

    def __init__(self, answer: bytes = b"hello", echo: bool = False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answer, self.echo = answer, echo
        self.sending_at: float | None = None
        self.sent_at: float | None = None
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(4)
            self.sending_at = time.monotonic()
            conn.sendall(self.answer)
            self.sent_at = time.monotonic()
            while data := conn.recv(1 << 16):
                self.received += data
                if self.echo:
                    conn.sendall(data)
                time.sleep(0.001)  # a slow reader: the client's writes back up

    def close(self) -> None:
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.mark.parametrize("run", _loops())
@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "event-loop"])
def test_a_read_is_dated_when_its_bytes_arrived_not_when_the_loop_got_to_them(run, kernel):
    server = Server()

    async def go():
        backend = _AsyncioBackend(kernel_stamps=kernel)
        stream = await backend.connect_tcp("127.0.0.1", server.port, timeout=10)
        try:
            assert isinstance(stream._transport, _KernelStamped) is kernel
            await stream.write(b"ping")
            deadline = time.monotonic() + 10
            while server.sent_at is None and time.monotonic() < deadline:
                time.sleep(0.001)  # blocking: the loop does nothing meanwhile
            time.sleep(HELD_S)  # the answer was sent; the loop is still held
            released = time.monotonic()
            data = await stream.read(100)
            return data, stream.last_read_at, released
        finally:
            await stream.aclose()

    data, read_at, released = run(go())
    server.close()
    assert data == b"hello" and server.sent_at is not None
    if kernel:
        # the kernel dated the bytes as they came in: after the server began to send them,
        # long before the loop was let go (they were sent before it was held)
        assert server.sending_at <= read_at + 0.001 and read_at < released - HELD_S / 2
    else:
        assert read_at >= released  # the loop's own stamp: when it got round to them


@pytest.mark.parametrize("run", _loops())
def test_the_kernel_stamped_transport_moves_megabytes_both_ways_under_back_pressure(run):
    payload = bytes(range(256)) * (3 << 12)  # 3 MiB: past the write and read buffers
    server = Server(answer=b"", echo=True)

    async def go():
        backend = _AsyncioBackend(kernel_stamps=True)
        stream = await backend.connect_tcp("127.0.0.1", server.port, timeout=10)
        transport, protocol = stream._transport, stream._protocol
        # a small send buffer, so the kernel takes only part of each write
        stream.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 15)
        pauses = []
        pause = protocol.pause_writing
        protocol.pause_writing = lambda: (pauses.append(len(transport._pending)), pause())
        await stream.write(b"ping")
        for i in range(0, len(payload), 1 << 18):
            await stream.write(payload[i : i + (1 << 18)], timeout=30)
        got = bytearray()
        async with asyncio.timeout(60):
            while len(got) < len(payload):
                got += await stream.read(1 << 16)
                if len(got) == 1 << 16:
                    time.sleep(0.5)  # hold the loop: the echo piles up past the read buffer
        await stream.aclose()
        await asyncio.sleep(0)  # connection_lost comes on the next loop turn
        return bytes(got), pauses, transport.is_closing(), protocol.eof

    got, pauses, closing, eof = run(go())
    server.close()
    assert got == payload and bytes(server.received) == payload
    assert pauses  # the kernel took less than was written at once: the writer waited
    assert closing and eof


@pytest.mark.parametrize("run", _loops())
def test_the_end_of_the_stream_reads_as_empty_and_a_closed_port_is_a_connect_error(run):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]

    def answer_and_close():
        conn, _ = sock.accept()
        with conn:
            conn.sendall(b"bye")

    thread = threading.Thread(target=answer_and_close, daemon=True)
    thread.start()

    async def go():
        backend = _AsyncioBackend(kernel_stamps=True)
        stream = await backend.connect_tcp("127.0.0.1", port, timeout=10)
        chunks = []
        async with asyncio.timeout(10):
            while data := await stream.read(100):
                chunks.append(data)
        await stream.aclose()
        with contextlib.closing(socket.socket()) as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            closed_port = probe.getsockname()[1]
        with pytest.raises(httpcore.ConnectError):
            await backend.connect_tcp("127.0.0.1", closed_port, timeout=10)
        return b"".join(chunks), backend.kernel_stamps

    data, still_kernel = run(go())
    thread.join(timeout=10)
    sock.close()
    assert data == b"bye" and still_kernel  # a refused connection is not a refused option
