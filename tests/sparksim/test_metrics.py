"""The simulated /metrics must read exactly like vLLM V1's to a Prometheus parser."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sparksim.metrics import (
    CONTENT_TYPE,
    FINISH_REASONS,
    PER_TOKEN_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    VllmMetrics,
    build_1_2_5_buckets,
)

MODEL = "nvidia/Test-Model-FP4"
CACHE_CONFIG = {
    "block_size": "16",
    "cache_dtype": "auto",
    "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.9",
    "num_gpu_blocks": "12345",
}

GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
COUNTERS = [
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:request_success",
    "vllm:num_preemptions",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
]
HISTOGRAMS = [
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_time_per_output_token_seconds",
    "vllm:iteration_tokens_total",
]


def make() -> VllmMetrics:
    return VllmMetrics(model_name=MODEL, max_model_len=32768, cache_config=CACHE_CONFIG)


def families(metrics: VllmMetrics) -> dict[str, tuple[str, list[Sample]]]:
    text = metrics.render().decode("utf-8")
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def value(fams: dict, family: str, sample: str, **labels: str) -> float:
    matches = [
        s.value
        for s in fams[family][1]
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (family, sample, labels, matches)
    return matches[0]


def test_every_family_present_with_its_type() -> None:
    fams = families(make())
    for name in GAUGES:
        assert fams[name][0] == "gauge"
    for name in COUNTERS:
        assert fams[name][0] == "counter"
    for name in HISTOGRAMS:
        assert fams[name][0] == "histogram"
    assert fams["vllm:cache_config_info"][0] == "gauge"


def test_counters_are_exposed_with_total_suffix() -> None:
    text = make().render().decode()
    for name in COUNTERS:
        assert f"\n{name}_total{{" in text


def test_every_series_has_model_name_and_engine_labels() -> None:
    fams = families(make())
    for name, (_, samples) in fams.items():
        if name == "vllm:cache_config_info":
            continue
        assert samples, name
        for sample in samples:
            assert sample.labels["model_name"] == MODEL, sample
            assert sample.labels["engine"] == "0", sample


def test_cache_config_info_labels_as_vllm() -> None:
    # vLLM labels this gauge with the cache config's fields plus engine only.
    (sample,) = families(make())["vllm:cache_config_info"][1]
    assert sample.labels == {**CACHE_CONFIG, "engine": "0"}
    assert sample.value == 1


def test_request_success_has_a_series_per_reason_from_the_start() -> None:
    fams = families(make())
    for reason in FINISH_REASONS:
        assert (
            value(
                fams, "vllm:request_success", "vllm:request_success_total", finished_reason=reason
            )
            == 0
        )


def test_values_after_activity() -> None:
    m = make()
    m.set_queue(running=3, waiting=2)
    m.set_kv_usage(0.375)
    m.add_prompt_tokens(100)
    m.add_prompt_tokens(28)
    m.add_generation_tokens(17)
    m.add_preemptions()
    m.add_preemptions(2)
    m.add_prefix_cache(queries=128, hits=64)
    m.observe_iteration_tokens(128)
    m.observe_ttft(0.25)
    for _ in range(16):
        m.observe_inter_token(0.0625)
    m.observe_finished(
        finished_reason="stop",
        prompt_tokens=128,
        generation_tokens=17,
        queue_s=0.5,
        prefill_s=0.25,
        decode_s=2.0,
        ttft_s=0.75,  # accepted, but TTFT is observed by observe_ttft only
        e2e_s=3.0,
    )
    m.observe_finished(
        finished_reason="length",
        prompt_tokens=8,
        generation_tokens=1,
        queue_s=0.0,
        prefill_s=0.5,
        decode_s=0.0,
        e2e_s=0.5,
    )
    f = families(m)
    assert value(f, "vllm:num_requests_running", "vllm:num_requests_running") == 3
    assert value(f, "vllm:num_requests_waiting", "vllm:num_requests_waiting") == 2
    assert value(f, "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") == 0.375
    assert value(f, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == 128
    assert value(f, "vllm:generation_tokens", "vllm:generation_tokens_total") == 17
    assert value(f, "vllm:num_preemptions", "vllm:num_preemptions_total") == 3
    assert value(f, "vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total") == 128
    assert value(f, "vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total") == 64
    success = "vllm:request_success_total"
    assert value(f, "vllm:request_success", success, finished_reason="stop") == 1
    assert value(f, "vllm:request_success", success, finished_reason="length") == 1
    assert value(f, "vllm:request_success", success, finished_reason="abort") == 0

    def count_sum(name: str) -> tuple[float, float]:
        return value(f, name, name + "_count"), value(f, name, name + "_sum")

    assert count_sum("vllm:time_to_first_token_seconds") == (1, 0.25)  # not double counted
    assert count_sum("vllm:inter_token_latency_seconds") == (16, 1.0)
    assert count_sum("vllm:iteration_tokens_total") == (1, 128)
    assert count_sum("vllm:e2e_request_latency_seconds") == (2, 3.5)
    assert count_sum("vllm:request_queue_time_seconds") == (2, 0.5)
    assert count_sum("vllm:request_prefill_time_seconds") == (2, 0.75)
    assert count_sum("vllm:request_decode_time_seconds") == (2, 2.0)
    assert count_sum("vllm:request_inference_time_seconds") == (2, 2.75)
    assert count_sum("vllm:request_prompt_tokens") == (2, 136)
    assert count_sum("vllm:request_generation_tokens") == (2, 18)
    # 2.0 s over the 16 tokens after the first; the one-token request observes 0.
    assert count_sum("vllm:request_time_per_output_token_seconds") == (2, 0.125)


def test_kv_usage_is_clamped_to_a_fraction() -> None:
    m = make()
    m.set_kv_usage(1.5)
    assert value(families(m), "vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc") == 1.0


def bucket_bounds(fams: dict, name: str) -> list[float]:
    return [float(s.labels["le"]) for s in fams[name][1] if s.name == name + "_bucket"]


@pytest.mark.parametrize(
    ("name", "buckets"),
    [
        ("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
        ("vllm:inter_token_latency_seconds", PER_TOKEN_BUCKETS),
        ("vllm:request_time_per_output_token_seconds", PER_TOKEN_BUCKETS),
        ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
        ("vllm:request_prompt_tokens", build_1_2_5_buckets(32768)),
    ],
)
def test_bucket_boundaries(name: str, buckets: tuple[float, ...] | list[int]) -> None:
    assert bucket_bounds(families(make()), name) == [*map(float, buckets), math.inf]


def test_ttft_buckets_are_vllms() -> None:
    assert TTFT_BUCKETS == (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    )  # fmt: skip


def test_build_1_2_5_buckets() -> None:
    assert build_1_2_5_buckets(100) == [1, 2, 5, 10, 20, 50, 100]
    assert build_1_2_5_buckets(32768)[-1] == 20000


def test_registries_are_private() -> None:
    a, b = make(), make()
    a.add_prompt_tokens(5)
    assert value(families(b), "vllm:prompt_tokens", "vllm:prompt_tokens_total") == 0
    assert b"process_cpu_seconds_total" not in a.render()


def test_content_type() -> None:
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")
