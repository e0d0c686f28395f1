"""The panel's real ASGI application (gateway included) under uvicorn with the panel's own
HTTP protocol, in a thread of the test process (so it sees the test's database and
settings), and real Redis. A pytest plugin (tests/conftest.py): the gateway tests and the
real-vLLM tests use it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
import uvicorn

from apps.core.redisconn import shared_client
from apps.gateway.keys import key_create
from sparkpanel.httpserver import HttpToolsBoundedProtocol
from tests.conftest import free_port, wait_for


@dataclass
class Panel:
    url: str
    server: uvicorn.Server

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def flush_gateway_keys(url: str) -> None:
    client = shared_client(url, timeout=2.0)
    keys = list(client.scan_iter("gw:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def fresh_gateway_keys(redis_url) -> None:
    """No gateway state in Redis from an earlier test (a pending load, the line, a run's
    last use: keyed by ids a later test's rows may get again)."""
    flush_gateway_keys(redis_url)


@pytest.fixture
def panel(transactional_db, redis_url, settings) -> Panel:
    from sparkpanel.asgi import application

    flush_gateway_keys(redis_url)
    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, http=HttpToolsBoundedProtocol,
        lifespan="off", log_level="warning", loop="asyncio",
        proxy_headers=False,  # no proxy in front: as make run without FORWARDED_ALLOW_IPS
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 20, "the panel's server")
    yield Panel(url=f"http://127.0.0.1:{port}", server=server)
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def gateway_key():
    def make(user, **kwargs) -> str:
        return key_create(user=user, name=kwargs.pop("name", "test"), **kwargs)[1]

    return make
