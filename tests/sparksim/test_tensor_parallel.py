"""sparksim over a real two-node Ray cluster (a simulated pair of Sparks on 127.0.0.2 and
127.0.0.3): it refuses what vLLM refuses, places one rank per node through a placement
group, keeps each Spark's memory on that Spark, logs as vLLM over Ray does, and dies when a
rank's Spark goes away (sparksim/tensor_parallel.py)."""

from __future__ import annotations

import time

import pytest

from sparkdomain.planner.link import step_comm_seconds
from sparkdomain.spark import GB
from sparksim.engine import decode_step_seconds
from sparksim.profiles import resolve_profile
from tests.conftest import wait_for
from tests.raycluster import HEAD_IP, WORKER_IP, start_cluster
from tests.sparksim.conftest import launch
from vllm_adapter.logparse import LogFollower, Phase

MODEL = "nvidia/Qwen3.5-35B-A3B-NVFP4"
PAIR = ["--tensor-parallel-size", "2", "--distributed-executor-backend", "ray",
        "--gpu-memory-utilization", "0.8", "--max-model-len", "16384", "--max-num-seqs", "4"]  # fmt: skip


def _mem_available(path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no MemAvailable in {path}")


@pytest.fixture(scope="module")
def cluster():
    # The worker Spark leaks (its own fault, from its own Ray node's environment): the
    # head's memory must not follow it.
    cluster = start_cluster(worker_faults="mem-growth:60")
    yield cluster
    cluster.stop()


def test_tensor_parallel_without_ray_is_refused_as_vllm_refuses_it_on_a_spark(tmp_path):
    sim = launch(tmp_path, "--tensor-parallel-size", "2", model=MODEL, ready=False)
    assert sim.proc.wait(timeout=60) == 1
    assert "World size (2) is larger than the number of available GPUs (1) in this node" in (
        sim.log()
    )
    assert "set '--distributed-executor-backend ray'" in sim.log()


def test_a_pair_places_one_rank_on_each_spark_and_serves(cluster, tmp_path):
    sim = launch(tmp_path, *PAIR, model=MODEL, time_scale=20,
                 env={"RAY_ADDRESS": cluster.address, "VLLM_HOST_IP": HEAD_IP})  # fmt: skip
    try:
        log = sim.log()
        assert "No current placement group found. Creating a new placement group." in log
        assert f"rank=0 local_rank=0 distributed_init_method=tcp://{HEAD_IP}" in log
        assert "rank=1 local_rank=0" in log and f"ip={WORKER_IP})" in log
        # a pair spreads the ranks over two nodes: vLLM warns about it for each node
        assert log.count("Tensor parallel workers can be spread out to 2+ nodes") == 2

        # The panel follows a pair's start from this log: the workers' lines come through
        # Ray with its "(RayWorkerProc pid=N) " prefix.
        follower = LogFollower()
        follower.feed(log)
        assert "(RayWorkerProc pid=" in log.split("Loading safetensors checkpoint shards")[0]
        assert follower.phase is Phase.SERVING and follower.ready and follower.error is None
        assert follower.facts["kv_cache_tokens"] > 0

        with sim.client() as http:
            answer = http.post("/v1/chat/completions", json={
                "model": MODEL, "max_tokens": 8,
                "messages": [{"role": "user", "content": "hello"}]})  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == 8

        # Each Spark holds its half on its own meminfo (the planner's per-Spark weights),
        # and only the worker's leak moves the worker's file. A rank is told its footprint
        # by a Ray actor call the server does not wait for (as a real rank's allocation is
        # not the API server's business): on a busy machine the file may show it a little
        # after the server says it is ready — the agent reads the file over time too.
        wait_for(lambda: _mem_available(cluster.head.meminfo) < 0.5 * 125 * GB, 30,
                 "the head's pool (0.8 × 121.7 GiB) in use on its meminfo")  # fmt: skip
        head_free = _mem_available(cluster.head.meminfo)
        wait_for(lambda: _mem_available(cluster.worker.meminfo) < head_free - 5 * GB, 30,
                 "the worker Spark's leak on its own meminfo")  # fmt: skip
        assert abs(_mem_available(cluster.head.meminfo) - head_free) < 0.5 * GB
    finally:
        assert sim.stop() == 0
    # A stopped server gives both Sparks their memory back (its ranks are gone).
    wait_for(lambda: _mem_available(cluster.head.meminfo) > 100 * GB, 20, "head memory freed")


def test_without_a_second_gpu_the_placement_group_waits_then_fails_as_vllm_does(tmp_path):
    alone = start_cluster(worker=False)
    try:
        # vLLM waits 1,800 s for the group: at 1,000× that is under two seconds
        sim = launch(tmp_path, *PAIR, model=MODEL, time_scale=1000, ready=False,
                     env={"RAY_ADDRESS": alone.address})  # fmt: skip
        assert sim.proc.wait(timeout=90) == 1
        log = sim.log()
        assert "Waiting for creating a placement group of specs for 10 seconds" in log
        assert "Cannot provide a placement group requiring 2 GPUs" in log
        assert "within 1800 seconds" in log
    finally:
        alone.stop()


def test_the_worker_spark_going_away_mid_serve_ends_the_server(tmp_path):
    pair = start_cluster()
    try:
        sim = launch(tmp_path, *PAIR, model=MODEL, time_scale=20,
                     env={"RAY_ADDRESS": pair.address})  # fmt: skip
        pair.worker.kill()  # the worker Spark's Ray node (and its rank) SIGKILLed
        started = time.monotonic()
        assert sim.proc.wait(timeout=120) == 1
        log = sim.log()
        assert "RayWorkerProc rank=[1] died unexpectedly, shutting down executor." in log
        assert "EngineDeadError: EngineCore encountered an issue" in log
        follower = LogFollower()
        follower.feed(log)
        assert follower.error is not None and follower.error.cause == "ray_rank_died"
        assert time.monotonic() - started < 110
    finally:
        pair.stop()


def test_a_pair_step_reads_half_on_each_spark_then_pays_the_link():
    profile = resolve_profile(MODEL)
    arch, contexts = profile.architecture, [1000, 2000, 3000]
    one = decode_step_seconds(profile, arch, 1, contexts)
    two = decode_step_seconds(profile, arch, 1, contexts, tp=2)
    overhead = profile.step_overhead_s
    comm = step_comm_seconds(arch, len(contexts))
    assert comm > 0
    assert two == pytest.approx((one - overhead) / 2 + overhead + comm)
    assert two < one
