"""sparksim holds a request's KV blocks as vLLM's KV cache manager does for the command:
every group of the layout the start-up predicted (vllm_adapter/startup/kv.py) — a hybrid's
state blocks and its big attention blocks, a sliding window's capped ones — not 16-token
blocks counted against vLLM's block total."""

from __future__ import annotations

import asyncio
import types

import httpx
import pytest

from sparksim.engine import Clock, Engine, SimRequest
from sparksim.metrics import VllmMetrics
from sparksim.profiles import resolve_profile
from sparksim.startup import Plan
from tests.model_configs import GPT_OSS_20B, NEMOTRON_NANO, hf_cache
from vllm_adapter.startup import predict

NANO = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"
NANO_SIZE = 19_000_000_000
# Tight on purpose: a few hundred blocks of 2,096 tokens (vLLM: "Maximum concurrency for
# 8,192 tokens per request" about 19x) — as 16-token blocks they would hold under 5k tokens.
NANO_FLAGS = ["--gpu-memory-utilization", "0.2", "--max-model-len", "8192",
              "--max-num-seqs", "8"]  # fmt: skip


def _prediction(config: dict, flags: list[str], size: int):
    return predict(config, ["vllm", "serve", "m", *flags], vllm_version="0.33.0",
                   total_gib=119.7, checkpoint_gib=size / 2**30)  # fmt: skip


def _plan(prediction) -> Plan:
    blocks = prediction.breakdown["num_blocks"]
    return Plan(weights=0, pool=0, graphs=0, kv_available=0, per_token=0, per_seq_max=0,
                state=0, tokens=prediction.kv_cache_tokens, blocks=blocks, free_at_start=0,
                prediction=prediction)  # fmt: skip


def test_a_hybrid_request_holds_its_state_blocks_and_big_attention_blocks():
    p = _prediction(NEMOTRON_NANO, NANO_FLAGS, NANO_SIZE)
    plan = _plan(p)
    assert p.block_size > 1000  # raised so an attention page holds a Mamba state
    one = plan.blocks_at(1)
    # Each Mamba group holds its state blocks whatever the length; attention grows by blocks
    # of block_size tokens.
    assert plan.blocks_at(p.block_size) == one
    assert plan.blocks_at(p.block_size + 1) == one + 1
    # vLLM's concurrency line is the same arithmetic at max_model_len.
    assert plan.blocks / plan.blocks_at(8192) == pytest.approx(p.max_concurrency, rel=0.01)


def test_a_sliding_window_group_stops_growing_at_its_window():
    flags = ["--gpu-memory-utilization", "0.5", "--max-model-len", "32768"]
    config = {**GPT_OSS_20B, "layer_types": ["sliding_attention", "full_attention"] * 12}
    p = _prediction(config, flags, 13_761_264_768)
    plan = _plan(p)
    # Past the window (plus the tokens in flight) only the full-attention groups grow, a
    # block every 16 tokens; the sliding groups stay capped.
    cap = max(window for kind, _block, _fixed, window in p.layout.per_group if kind == "sliding")
    near = (cap // 16 + 2) * 16
    assert near < 32768
    full_groups = sum(1 for kind, *_ in p.layout.per_group if kind == "full")
    assert full_groups >= 1
    assert plan.blocks_at(32768) - plan.blocks_at(near) == full_groups * (32768 - near) // 16
    assert plan.blocks_at(near) > plan.blocks_at(16)
    far = plan.blocks_at(32768)
    assert plan.blocks / far == pytest.approx(p.max_concurrency, rel=0.01)


def test_a_plan_without_a_prediction_counts_16_token_blocks():
    plan = Plan(weights=0, pool=0, graphs=0, kv_available=0, per_token=0, per_seq_max=0,
                state=0, tokens=1600, blocks=100, free_at_start=0)  # fmt: skip
    assert plan.blocks_at(16) == 1 and plan.blocks_at(17) == 2


def _engine(plan: Plan, blocks_at) -> Engine:
    profile = resolve_profile(NANO)
    metrics = VllmMetrics(model_name=NANO, max_model_len=8192,
                          cache_config={"block_size": 16, "num_gpu_blocks": plan.blocks})  # fmt: skip
    return Engine(profile=profile, architecture=profile.architecture, metrics=metrics,
                  clock=Clock(), max_model_len=8192, max_num_seqs=8,
                  max_num_batched_tokens=8192, num_blocks=plan.blocks,
                  blocks_at=blocks_at)  # fmt: skip


def test_eight_1k_requests_on_a_hybrid_are_admitted_together():
    """The scheduler's own decision, free of wall-clock timing: eight 1.1k-token requests
    on a cache vLLM sizes for 8 or more of 8k all run at once; the same blocks counted as
    16-token blocks (the old accounting) would admit only a few of them."""
    plan = _plan(_prediction(NEMOTRON_NANO, NANO_FLAGS, NANO_SIZE))
    assert plan.blocks / plan.blocks_at(8192) >= 8

    def admitted(blocks_at) -> int:
        engine = _engine(plan, blocks_at)
        for i in range(8):
            engine.submit(SimRequest(request_id=f"r{i}", prompt_ids=[i] * 1100, max_tokens=96))
        engine._admit()
        return len(engine.running)

    assert admitted(plan.blocks_at) == 8
    assert admitted(None) < 8


@pytest.mark.timeout(180)
def test_concurrent_requests_a_hybrid_has_room_for_run_side_by_side(start_sim, tmp_path):
    """Eight 1k-token requests through the server: all finish and none is preempted (a
    request that waited for a slot is a matter of a busy machine's timing, so the
    admission itself is judged by the engine test above)."""
    env = hf_cache(tmp_path / "hub", NANO, NEMOTRON_NANO, NANO_SIZE)
    sim = start_sim(*NANO_FLAGS, model=NANO, time_scale=1, env=env)
    line = sim.log().split("Maximum concurrency for 8,192 tokens per request: ")[1]
    assert float(line.split("x")[0]) >= 8
    prompt = "The DGX Spark serves models from its unified memory. " * 100

    async def one(client: httpx.AsyncClient) -> dict:
        body = {"model": sim.model, "prompt": prompt, "max_tokens": 96, "ignore_eos": True}
        return (await client.post("/v1/completions", json=body)).json()

    async def all_of_them() -> list[dict]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=120) as client:
            return await asyncio.gather(*(one(client) for _ in range(8)))

    done = asyncio.run(all_of_them())
    assert all(d["usage"]["completion_tokens"] == 96 for d in done)
    assert min(d["usage"]["prompt_tokens"] for d in done) > 900
    metrics = sim.metrics()
    assert metrics[("vllm:num_preemptions_total", ())] == 0
    assert metrics[("vllm:request_queue_time_seconds_count", ())] == 8


def test_the_prediction_keeps_its_layout_out_of_its_dict():
    p = _prediction(NEMOTRON_NANO, NANO_FLAGS, NANO_SIZE)
    assert p.layout is not None and "layout" not in p.as_dict()
    assert isinstance(p.as_dict()["breakdown"], dict)
    assert types.SimpleNamespace(**p.as_dict()).block_size == p.block_size
