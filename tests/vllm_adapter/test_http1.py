"""vllm_adapter.http1's Pool (the gateway's client to vLLM): kept-alive connections are
reused — against the real uvicorn of a sparksim — and never when the server says the
connection ends, and a kept-alive connection the server closed while idle is replaced
without the request failing."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.sparksim.conftest import launch
from vllm_adapter.http1 import Pool

BODY = json.dumps({"model": "nvidia/Qwen3.5-35B-A3B-NVFP4", "max_tokens": 3,
                   "messages": [{"role": "user", "content": "Hi"}]}).encode()  # fmt: skip
HEADERS = [(b"content-type", b"application/json")]


async def _ask(pool: Pool, port: int, body: bytes = BODY) -> tuple[int, bytes, tuple]:
    response = await pool.request("127.0.0.1", port, "POST", "/v1/chat/completions", HEADERS,
                                  body, head_timeout=30, read_timeout=30)  # fmt: skip
    local = response._conn.transport.get_extra_info("sockname")
    return response.status, await response.read(1 << 20), local


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("http1"), "--gpu-memory-utilization", "0.85",
                 "--max-model-len", "8192", model="nvidia/Qwen3.5-35B-A3B-NVFP4",
                 time_scale=50)  # fmt: skip
    yield int(sim.url.rsplit(":", 1)[1])
    sim.stop()


def test_one_connection_serves_request_after_request_on_a_real_server(sim):
    streamed = json.dumps({**json.loads(BODY), "stream": True}).encode()

    async def go():
        pool = Pool()
        try:
            return [await _ask(pool, sim, body) for body in (BODY, streamed, BODY, streamed)]
        finally:
            pool.close()

    answers = asyncio.run(go())
    assert [status for status, _, _ in answers] == [200] * 4
    assert json.loads(answers[0][1])["usage"]["completion_tokens"] == 3
    assert answers[1][1].rstrip().endswith(b"data: [DONE]")
    # The same local address each time: one TCP connection carried all four.
    assert len({local for _, _, local in answers}) == 1, answers


class _Server:
    """A minimal HTTP/1.1 server for the cases a real vLLM does not choose on demand: it
    answers each request "ok", with `Connection: close` (and closes) when told to, and
    counts the connections it accepted."""

    def __init__(self, *, close_after_answer: bool):
        self.close_after_answer = close_after_answer
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader, writer):
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                await reader.readexactly(length)
                extra = b"Connection: close\r\n" if self.close_after_answer else b""
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + extra + b"\r\nok")
                await writer.drain()
                if self.close_after_answer:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _serve(close_after_answer: bool, scenario):
    async def go():
        server = _Server(close_after_answer=close_after_answer)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        pool = Pool()
        try:
            return server, await scenario(pool, port, server)
        finally:
            pool.close()
            listener.close()

    return asyncio.run(go())


def test_a_connection_the_server_ends_is_not_kept():
    async def three(pool, port, server):
        return [await _ask(pool, port) for _ in range(3)]

    server, answers = _serve(True, three)
    assert [(status, body) for status, body, _ in answers] == [(200, b"ok")] * 3
    assert server.connections == 3


def test_a_kept_connection_the_server_closed_while_idle_is_replaced():
    async def closed_between(pool, port, server):
        first = await _ask(pool, port)
        for writer in server.writers:  # the server's keep-alive timeout, as uvicorn's
            writer.close()
        await asyncio.sleep(0.2)
        return first, await _ask(pool, port)

    server, (first, second) = _serve(False, closed_between)
    assert first[:2] == second[:2] == (200, b"ok")
    assert server.connections == 2
