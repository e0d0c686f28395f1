"""Speculative decoding in sparksim (issue 41): a step verifies 1 + k tokens of each
sequence and runs the drafter, a sequence gets 1 + its accepted drafts, and the server
exports vLLM's own counters (vllm:spec_decode_*) and logs its "SpecDecoding metrics" line —
read back here with the panel's parser, as from a real server."""

from __future__ import annotations

import dataclasses
import json
import types

import httpx
import pytest

from sparkdomain.planner import kv_element_bytes
from sparksim import engine
from sparksim.checkpoint import find
from sparksim.profiles import resolve_profile
from tests.model_configs import LLAMA_70B, MOE, hf_cache
from vllm_adapter import metrics as scrape
from vllm_adapter.speculative import from_config

SYNTHETIC = {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.6, 0.3]}


def _step(tmp_path, repo, config, size, spec_json, n=1, context=2048):
    env = hf_cache(tmp_path / "hub", repo, config, size)
    checkpoint = find(repo, environ=env)
    spec = from_config(spec_json, checkpoint.model.mtp_layers, checkpoint.model.model_type)
    args = types.SimpleNamespace(quantization=None, tensor_parallel_size=1)
    reads = checkpoint.reads(args, spec, environ=env)
    profile = dataclasses.replace(resolve_profile(repo), architecture=checkpoint.architecture,
                                  reads=reads)  # fmt: skip
    element = kv_element_bytes(checkpoint.architecture, "auto")
    seconds = engine.checkpoint_step_seconds(profile, checkpoint.architecture, element,
                                             [context] * n, spec=spec)  # fmt: skip
    return seconds, reads, spec


def test_a_dense_model_gains_by_the_accepted_drafts_less_the_drafters_cost(tmp_path):
    """A dense 70B reads the same weights for 1 or 1 + k tokens: a step with an n-gram draft
    (no drafter weights) costs what a plain step costs, and gives 1 + accepted tokens."""
    plain, _, _ = _step(tmp_path / "a", "meta-llama/Llama-3.3-70B-Instruct", LLAMA_70B,
                        42_709_041_152, None)  # fmt: skip
    lookup, reads, spec = _step(tmp_path / "b", "meta-llama/Llama-3.3-70B-Instruct", LLAMA_70B,
                                42_709_041_152, {"method": "ngram", "num_speculative_tokens": 3,
                                                 **SYNTHETIC})  # fmt: skip
    assert reads.draft.dense_bytes == 0 and spec.draft_passes == 0
    assert lookup == pytest.approx(plain, rel=0.01)
    assert spec.mean_acceptance_length / lookup > 2.5 / plain
    # An EAGLE head without its checkpoint in the cache: an estimated layer and head a pass.
    eagle, reads, spec = _step(tmp_path / "c", "meta-llama/Llama-3.3-70B-Instruct", LLAMA_70B,
                               42_709_041_152, {"method": "eagle3", "model": "x/eagle3-head",
                                                "num_speculative_tokens": 3})  # fmt: skip
    assert "estimated" in reads.draft.source and spec.draft_passes == 3
    assert plain < eagle < 1.3 * plain


def test_verifying_k_drafts_of_a_moe_touches_the_experts_of_1_plus_k_tokens(tmp_path):
    """Why MTP gains little on a big MoE at one stream: the verify pass routes 1 + k tokens,
    each to its own top-k experts."""
    plain, reads, _ = _step(tmp_path / "a", "Qwen/Qwen3-30B-A3B", MOE, 16_500_000_000, None)
    three, _, _ = _step(tmp_path / "b", "Qwen/Qwen3-30B-A3B", MOE, 16_500_000_000,
                           {"method": "ngram", "num_speculative_tokens": 3})  # fmt: skip
    assert reads.weights(4) > reads.weights(1) * 1.5
    assert three / plain == pytest.approx(reads.weights(4) / reads.weights(1), rel=0.1)


@pytest.mark.timeout(180)
def test_the_server_drafts_accepts_and_counts_as_vllm_does(start_sim, tmp_path):
    env = hf_cache(tmp_path / "hub", "meta-llama/Llama-3.3-70B-Instruct", LLAMA_70B, 42_709_041_152)
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, **SYNTHETIC}
    sim = start_sim("--gpu-memory-utilization", "0.85", "--max-model-len", "4096",
                    "--max-num-seqs", "4", "--speculative-config",
                    json.dumps(config), model="meta-llama/Llama-3.3-70B-Instruct",
                    time_scale=50, env=env)  # fmt: skip
    body = {"model": sim.model, "prompt": "Tell me about the DGX Spark.", "max_tokens": 400,
            "ignore_eos": True}  # fmt: skip
    with httpx.Client(base_url=sim.url, timeout=60) as client:
        done = client.post("/v1/completions", json=body).json()
        assert done["usage"]["completion_tokens"] == 400
        snap = scrape.parse(client.get("/metrics").text)
    # One draft per step after the first token; 1 + accepted tokens a step.
    assert snap.spec_draft_tokens == 3 * snap.spec_drafts
    assert 399 / 4 <= snap.spec_drafts <= 399
    assert snap.generation_tokens == 400
    assert snap.spec_accepted <= 399 - snap.spec_drafts + 3  # the last step may be cut short
    assert snap.spec_mean_acceptance_length == pytest.approx(2.8, abs=0.35)
    assert snap.spec_acceptance_rate == pytest.approx(1.8 / 3, abs=0.12)
    assert snap.spec_per_position == pytest.approx([0.9, 0.6, 0.3], abs=0.15)
    log = sim.log()
    assert "speculative decoding ngram, 3 tokens: mean acceptance length 2.80" in log
    assert "SpecDecoding metrics: Mean acceptance length: " in log
    assert "Per-position acceptance rate: " in log


def test_a_server_without_speculative_decoding_has_no_spec_counters(fast_sim):
    snap = scrape.parse(httpx.get(fast_sim.url + "/metrics", timeout=5).text)
    assert snap.spec_drafts is None and snap.spec_acceptance_rate is None
    assert snap.spec_per_position is None


def test_a_speculative_config_vllm_refuses_stops_the_start(start_sim):
    sim = start_sim("--speculative-config", '{"method": "mtp", "num_speculative_tokens": 0}',
                    ready=False)  # fmt: skip
    assert sim.proc.wait(timeout=60) == 1
    assert "num_speculative_tokens must be between 1 and 128" in sim.log()


def test_a_cached_drafter_is_loaded_with_the_model_as_the_start_up_model_says(start_sim, tmp_path):
    """sparksim's "Model loading took" with an EAGLE-3 head in the cache is the start-up
    prediction with the head's checkpoint: the same accounting as `spark plan`."""
    from sparkdomain.spark import CUDA_VISIBLE_GIB
    from tests.model_configs import QWEN3_SMALL
    from vllm_adapter.startup import predict

    hub = tmp_path / "hub"
    env = hf_cache(hub, "Qwen/Qwen3-0.6B", QWEN3_SMALL, 1_202_590_842)
    head = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": 1024, "num_hidden_layers": 1, "num_attention_heads": 16,
            "vocab_size": 151936, "draft_vocab_size": 32000}  # fmt: skip
    hf_cache(hub, "x/qwen3-eagle3-head", head, 400_000_000)
    config = '{"method": "eagle3", "model": "x/qwen3-eagle3-head", "num_speculative_tokens": 3}'
    sim = start_sim("--gpu-memory-utilization", "0.6", "--speculative-config", config,
                    model="Qwen/Qwen3-0.6B", env=env)  # fmt: skip
    log = sim.log()
    version = log.split("vLLM server version ")[1].split(",")[0]
    p = predict(QWEN3_SMALL, ["vllm", "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization",
                              "0.6", "--speculative-config", config], vllm_version=version,
                total_gib=CUDA_VISIBLE_GIB, checkpoint_gib=1_202_590_842 / 2**30,
                drafter_gib=400_000_000 / 2**30)  # fmt: skip
    assert f"Model loading took {p.model_loading_gib:.4f} GiB" in log
    assert p.model_loading_gib > 1_202_590_842 / 2**30 + 0.3
    assert f"GPU KV cache size: {p.kv_cache_tokens:,} tokens" in log


def test_a_cached_draft_models_layers_hold_kv_in_the_simulated_start(start_sim, tmp_path):
    """A draft model in the cache: sparksim's "GPU KV cache size" counts its layers' KV as
    vLLM does (the start-up prediction with the drafter's config.json) — half the tokens
    for a model drafted by a copy of itself."""
    from sparkdomain.spark import CUDA_VISIBLE_GIB
    from tests.model_configs import QWEN3_SMALL
    from vllm_adapter.startup import predict

    hub = tmp_path / "hub"
    env = hf_cache(hub, "Qwen/Qwen3-0.6B", QWEN3_SMALL, 1_202_590_842)
    hf_cache(hub, "x/qwen3-draft", QWEN3_SMALL, 1_202_590_842)
    config = '{"method": "draft_model", "model": "x/qwen3-draft", "num_speculative_tokens": 3}'
    sim = start_sim("--gpu-memory-utilization", "0.6", "--speculative-config", config,
                    model="Qwen/Qwen3-0.6B", env=env)  # fmt: skip
    log = sim.log()
    version = log.split("vLLM server version ")[1].split(",")[0]
    argv = ["vllm", "serve", "Qwen/Qwen3-0.6B", "--gpu-memory-utilization", "0.6",
            "--speculative-config", config]  # fmt: skip
    kw = {"vllm_version": version, "total_gib": CUDA_VISIBLE_GIB,
          "checkpoint_gib": 1_202_590_842 / 2**30, "drafter_gib": 1_202_590_842 / 2**30}  # fmt: skip
    p = predict(QWEN3_SMALL, argv, drafter_config=QWEN3_SMALL, **kw)
    blind = predict(QWEN3_SMALL, argv, **kw)
    assert f"GPU KV cache size: {p.kv_cache_tokens:,} tokens" in log
    assert p.kv_cache_tokens < blind.kv_cache_tokens * 0.55
