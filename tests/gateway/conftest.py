"""Real sparksim servers that demand their run's key, behind ready runs; the panel itself
(`panel`, `gateway_key`) is in tests/gateway/fixtures.py, shared with tests/real_vllm."""

from __future__ import annotations

import pytest

SIM_ARGS = ["--gpu-memory-utilization", "0.8", "--max-model-len", "16384", "--max-num-seqs", "16"]


@pytest.fixture
def replica(keyed_sim, qwen):
    """`replica(recipe=qwen, *faults, time_scale=20)`: a sparksim that demands its run's key,
    and a ready run of the recipe on a host of its own."""

    def start(recipe=None, *faults: str, time_scale: float = 20):
        args = list(SIM_ARGS)
        for fault in faults:
            args += ["--fault", fault]
        return keyed_sim(recipe or qwen, *args, time_scale=time_scale, prefix="gw")

    return start
