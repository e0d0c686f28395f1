"""What a decode step reads, from the checkpoint vLLM loads (sparksim/decode.py): the
weights outside the routed experts once, the experts the batch's tokens touch, never the
embedding table or the draft layers."""

from __future__ import annotations

import pytest

from sparksim.checkpoint import format_from_size
from sparksim.decode import step_reads
from tests.model_configs import GPT_OSS_20B, LLAMA_70B, MOE
from vllm_adapter.startup.model import read_model


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
    # One expert at NVFP4, scaled by what the checkpoint holds beyond what its config explains.
    one_expert = 3 * 2048 * 768 * 4.5 / 8 * reads.scale
    assert 0.85 < reads.scale < 1.15
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


def test_each_part_is_read_at_the_format_the_quantization_config_gives_it():
    """gpt-oss-20b (13,761,264,768 bytes, its index's total_size): MXFP4 experts, bf16
    attention (64 query heads of 64: wider than hidden) and head — the config's parts add up
    to the checkpoint's size within 1 %, and a token reads the attention, the head and 4 of
    32 experts a layer."""
    model = read_model(GPT_OSS_20B)
    reads = step_reads(model, 13_761_264_768, "mxfp4")
    assert reads.scale == pytest.approx(1.0, abs=0.01)
    attention = 24 * (4096 * 2880 * 2 + 2 * 8 * 64 * 2880) * 2
    head = 201088 * 2880 * 2
    assert reads.head_bytes == pytest.approx(head, rel=0.01)
    assert reads.dense_bytes == pytest.approx(attention + head, rel=0.02)
    assert reads.expert_bytes == pytest.approx(3 * 2880 * 2880 * 4.25 / 8, rel=0.01)


def test_a_mixed_export_reads_its_mixers_and_head_at_their_own_formats():
    """ModelOpt's MIXED_PRECISION config names each module's format: FP8 attention, an NVFP4
    head. Bytes the config does not explain are spread over every part (a wider format in
    some layers) instead of all landing on what each step reads."""
    config = {**MOE, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
              "quantized_layers": {
                  **{f"model.layers.{i}.self_attn.q_proj": {"quant_algo": "FP8"} for i in range(48)},
                  **{f"model.layers.{i}.mlp.experts": {"quant_algo": "NVFP4"} for i in range(48)},
                  "lm_head": {"quant_algo": "W4A16_NVFP4"}}}}  # fmt: skip
    model = read_model(config)
    fits = step_reads(model, 18e9, "nvfp4")
    bigger = step_reads(model, 1.2 * 18e9, "nvfp4")
    assert fits.head_bytes == pytest.approx(151936 * 2048 * 4.5 / 8 * fits.scale)
    assert bigger.scale == pytest.approx(1.2 * fits.scale)
    assert bigger.weights(1) == pytest.approx(1.2 * fits.weights(1))
    plain = step_reads(read_model(MOE), 18e9, "nvfp4")  # no config: head bf16, mixers NVFP4
    assert plain.head_bytes / plain.scale == pytest.approx(151936 * 2048 * 2)


def test_a_model_without_a_public_spark_measurement_is_labelled_estimated():
    from sparksim.decode import calibration_note

    assert calibration_note(read_model(LLAMA_70B)).startswith("decode speed checked against")
    assert "estimated" in calibration_note(read_model(MOE))  # qwen3_moe: none published
    assert "checked" in calibration_note(read_model(GPT_OSS_20B))
