"""The two servers the conformance suite compares: real vLLM (the session's shared
`real_vllm`) and a sparksim serving a model of the same name with the same flags."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.real_vllm.fixtures import SMALL_FLAGS, TINY_MODEL
from tests.sparksim.conftest import launch


@dataclass(frozen=True)
class Target:
    name: str  # "vllm" or "sparksim"
    url: str
    model: str


@pytest.fixture(scope="session")
def sim_target(tmp_path_factory):
    sim = launch(tmp_path_factory.mktemp("conformance-sim"), *SMALL_FLAGS, model=TINY_MODEL,
                 time_scale=50)  # fmt: skip
    yield Target("sparksim", sim.url, TINY_MODEL)
    sim.stop()


@pytest.fixture(scope="session")
def vllm_target(real_vllm):
    return Target("vllm", real_vllm.base_url, real_vllm.model)


@pytest.fixture
def both(vllm_target, sim_target) -> tuple[Target, Target]:
    """(real vLLM, sparksim): real vLLM first, it is the reference."""
    return vllm_target, sim_target
