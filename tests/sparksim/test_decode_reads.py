"""What a decode step reads, from the checkpoint vLLM loads (sparksim/decode.py): the
weights outside the routed experts once, the experts the batch's tokens touch, never the
embedding table or the draft layers."""

from __future__ import annotations

import pytest

from sparksim.checkpoint import format_from_size
from sparksim.decode import step_reads
from tests.sparksim.test_sim_startup import LLAMA_70B
from vllm_adapter.startup.model import read_model

MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
    "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
}  # fmt: skip


def test_a_dense_checkpoint_reads_everything_but_its_embedding_table():
    """Llama-3.3-70B NVFP4 (42.71 GB): 40.61 GB a token — the roofline NVIDIA's
    dgx-spark-playbooks PR #91 gives for its 4.0–4.2 tok/s."""
    reads = step_reads(read_model(LLAMA_70B), 42_709_041_152, "nvfp4")
    assert reads.weights(1) / 1e9 == pytest.approx(40.61, abs=0.01)
    assert reads.weights(32) == reads.weights(1)  # a batch reads the same weights once
    half = step_reads(read_model(LLAMA_70B), 42_709_041_152, "nvfp4", tp=2)
    assert half.weights(1) == pytest.approx(reads.weights(1) / 2)


def test_a_moe_step_reads_the_experts_its_tokens_touch():
    """E·(1 − (1 − k/E)^n) distinct experts a layer for n tokens of top-k routing."""
    model = read_model(MOE)
    reads = step_reads(model, 16.5e9, "nvfp4")
    one_expert = 3 * 2048 * 768 * 4.5 / 8
    assert reads.expert_bytes == pytest.approx(one_expert)
    assert reads.weights(1) - reads.dense_bytes == pytest.approx(48 * 8 * one_expert)
    touched = 128 * (1 - (1 - 8 / 128) ** 10)
    assert reads.weights(10) - reads.dense_bytes == pytest.approx(48 * touched * one_expert)
    assert reads.weights(10_000) - reads.dense_bytes == pytest.approx(48 * 128 * one_expert)


def test_a_checkpoint_without_a_quantization_block_is_judged_by_its_bytes_per_parameter():
    assert format_from_size(67e9, 124e9) == "int4"
    assert format_from_size(36e9, 35e9) == "fp8"
    assert format_from_size(71.7e9, 35.3e9) is None  # bf16 as it says
    assert format_from_size(1e9, 0) is None
