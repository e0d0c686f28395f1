"""Real sparksim servers that demand their run's key, behind ready runs; the panel itself
(`panel`, `gateway_key`) is in tests/gateway/fixtures.py, shared with tests/real_vllm."""

from __future__ import annotations

import uuid

import pytest

from apps.hosts.models import Host
from apps.runs.models import Run, RunState, new_api_key_salt
from tests.sparksim.conftest import launch

SIM_ARGS = ["--gpu-memory-utilization", "0.8", "--max-model-len", "16384", "--max-num-seqs", "16"]


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
