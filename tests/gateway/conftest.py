"""The panel's real ASGI application (gateway included) under uvicorn with the panel's own
HTTP protocol, in a thread of the test process (so it sees the test's database and
settings), real Redis, and real sparksim servers that demand their run's key."""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass

import pytest
import uvicorn

from apps.core.redisconn import shared_client
from apps.gateway import store
from apps.gateway.keys import key_create
from apps.hosts.models import Host
from apps.runs.models import Run, RunState, new_api_key_salt
from sparkpanel.httpserver import H11HeaderTimeoutProtocol
from tests.conftest import free_port, wait_for
from tests.sparksim.conftest import launch

SIM_ARGS = ["--gpu-memory-utilization", "0.8", "--max-model-len", "16384", "--max-num-seqs", "16"]


@dataclass
class Panel:
    url: str
    server: uvicorn.Server

    @property
    def v1(self) -> str:
        return self.url + "/v1"


def _flush_gateway_keys(url: str) -> None:
    client = shared_client(url, timeout=2.0)
    keys = list(client.scan_iter("gw:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture
def panel(transactional_db, redis_url, settings) -> Panel:
    from sparkpanel.asgi import application

    _flush_gateway_keys(redis_url)
    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, http=H11HeaderTimeoutProtocol,
        lifespan="off", log_level="warning", loop="asyncio",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 20, "the panel's server")
    yield Panel(url=f"http://127.0.0.1:{port}", server=server)
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def replica(tmp_path, qwen):
    """`replica(recipe=qwen, time_scale=20, *faults)`: a sparksim that demands its run's key,
    and a ready run of the recipe on a host of its own."""
    sims = []

    def start(recipe=None, *faults: str, time_scale: float = 20):
        recipe = recipe or qwen
        args = list(SIM_ARGS)
        for fault in faults:
            args += ["--fault", fault]
        salt = new_api_key_salt()
        key = Run(api_key_salt=salt).api_key
        sim = launch(tmp_path, *args, model=recipe.model_id, time_scale=time_scale, api_key=key)
        sims.append(sim)
        port = int(sim.url.rsplit(":", 1)[1])
        host = Host.objects.create(name=f"gw-{uuid.uuid4().hex[:6]}", engine="process",
                                   sim_time_scale=time_scale, simulated=True,
                                   port_min=port, port_max=port)  # fmt: skip
        run = Run.objects.create(recipe=recipe, host=host, port=port, image="x",
                                 state=RunState.STARTING, api_key_salt=salt)  # fmt: skip
        for to in (RunState.WARMING, RunState.READY):
            run.transition(to)  # as the runner does: the gateway hears of it
        return sim, run

    yield start
    for sim in sims:
        sim.stop()


@pytest.fixture
def gateway_key():
    def make(user, **kwargs) -> str:
        return key_create(user=user, name=kwargs.pop("name", "test"), **kwargs)[1]

    return make


def run_many(coros):
    async def gather():
        return await asyncio.gather(*coros, return_exceptions=True)

    return asyncio.run(gather())


def routes_version() -> str:
    return shared_client(store.url(), timeout=2.0).get(store.ROUTES) or "0"
