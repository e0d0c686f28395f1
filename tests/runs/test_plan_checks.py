"""Plan against measured, end to end with real sparksim starts: each ready run records what
the server reported beside the plan for its recipe on its host; the run page, the recipe
page, the planner preview, the wizard and the API show it; the next plan for that image on
that host carries the measured correction.

sparksim shares the planner's arithmetic and the host's memory, but takes what vLLM takes
on a Spark (5 GB of CUDA graphs, 3 GB of CUDA context), not the admin's estimates of it. A
host whose admin set 3 GB of CUDA graphs makes the planner predict 2 GB more KV cache than
the server then has — a known, hand-computed gap.
"""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.recipes.models import Recipe
from apps.runs import runner
from apps.runs.calibration import host_corrections, plan_check_record
from apps.runs.models import PlanCheck, Run, RunState
from apps.runs.services import run_start

pytestmark = pytest.mark.django_db(transaction=True)

GIB = 2**30
POOL = 0.5 * 121.7 * GIB  # utilization 0.5 × the 121.7 GiB CUDA reports
# The recipe: a dense 8B bf16 model (16 GB; 131,072 KV bytes a token, 1 GiB a sequence);
# sparksim serves any "…-8B" model with exactly that architecture (its generic profile).
PLANNED_KV_GIB = (POOL - 3e9 - 3e9 - 16e9) / GIB  # the host's 3 GB graphs: 40.3609
SERVED_KV_GIB = (POOL - 3e9 - 5e9 - 16e9) / GIB  # sparksim's 5 GB: 38.4983, printed "38.50"
PLANNED_TOKENS = 330_636  # floor((POOL − 22e9) / 131,072)
SERVED_TOKENS = 315_377  # floor((POOL − 24e9) / 131,072)
WEIGHTS_GIB = 16e9 / GIB


@pytest.fixture
def dense8b(db):
    return Recipe.objects.create(
        name="Dense 8B", slug="dense-8b", model_id="acme/Dense-8B-Instruct",
        gpu_memory_utilization=Decimal("0.50"), max_model_len=8192, max_num_seqs=4,
        total_params_b=8, weight_format="bf16", num_layers=32, kv_heads=8, head_dim=128,
    )  # fmt: skip


@pytest.fixture
def small_graphs_host(sim_host):
    sim_host.cuda_graphs_gb = 3.0
    sim_host.save()
    return sim_host


def _ready_run(recipe, host, user) -> Run:
    run = run_start(recipe=recipe, host=host, user=user)
    runner.start(run.pk)
    run.refresh_from_db()
    assert run.state == RunState.READY, (run.failure_reason, run.failure_log)
    return run


def test_a_ready_run_records_what_the_server_measured_beside_the_plan(
    small_graphs_host, dense8b, operator, client_as
):
    run = _ready_run(dense8b, small_graphs_host, operator)
    try:
        checks = {c.quantity: c for c in PlanCheck.objects.filter(run=run)}
        assert set(checks) == {"kv_cache_gib", "kv_cache_tokens", "max_concurrency",
                               "model_memory_gib"}  # fmt: skip
        kv = checks["kv_cache_gib"]
        assert kv.predicted == pytest.approx(PLANNED_KV_GIB)
        assert kv.measured == 38.5  # "Available KV cache memory: 38.50 GiB"
        assert kv.ratio == pytest.approx(38.5 / PLANNED_KV_GIB)  # 0.9539
        tokens = checks["kv_cache_tokens"]
        assert (tokens.predicted, tokens.measured) == (PLANNED_TOKENS, SERVED_TOKENS)
        assert tokens.ratio == pytest.approx(SERVED_TOKENS / PLANNED_TOKENS)  # 0.9539
        concurrency = checks["max_concurrency"]  # 315,377 ÷ 8,192 printed "38.50x"
        assert concurrency.measured == 38.5
        assert concurrency.predicted == pytest.approx(PLANNED_KV_GIB)  # 1 GiB a sequence
        model = checks["model_memory_gib"]  # the same weights on both sides
        assert model.ratio == pytest.approx(1.0, abs=1e-4)
        assert all(
            c.host == small_graphs_host and c.image == dense8b.image for c in checks.values()
        )
        assert plan_check_record(run=run) and PlanCheck.objects.filter(run=run).count() == 4

        page = client_as(operator).get(run.get_absolute_url()).content.decode()
        assert "Plan against measured" in page
        assert "Predicted by the panel planner for" in page  # no config.json known: the planner
        assert "40.36 GiB" in page and "38.50 GiB" in page and "0.95×" in page
        assert "330,636" in page and "315,377" in page
        assert "no image: a local process" in page  # a process host has no image digest

        api = client_as(operator).get(f"/api/v1/runs/{run.pk}").json()
        by_quantity = {c["quantity"]: c for c in api["plan_check"]}
        assert by_quantity["kv_cache_tokens"]["measured"] == SERVED_TOKENS
        assert by_quantity["kv_cache_gib"]["ratio"] == pytest.approx(38.5 / PLANNED_KV_GIB)
        assert api["image_digest"] == "" and api["image_pinned"] == ""
    finally:
        runner.stop(run.pk)


def test_the_next_plan_for_the_image_on_that_host_shows_the_measured_correction(
    small_graphs_host, dense8b, operator, client_as
):
    for _ in range(2):
        run = _ready_run(dense8b, small_graphs_host, operator)
        runner.stop(run.pk)
    [c] = host_corrections(image=dense8b.image, arch=dense8b.architecture(),
                           flags=dense8b.flags(), recipe=dense8b)  # fmt: skip
    assert c.host == small_graphs_host and c.scope == "of this recipe"
    assert c.result.corrections["kv_cache_gib"].starts == 2
    assert c.result.corrected["kv_cache_gib"] == pytest.approx(38.5)
    assert c.result.corrected["kv_cache_tokens"] == pytest.approx(SERVED_TOKENS)
    expected = (
        f"On {small_graphs_host.name} with {dense8b.image}, vLLM measured 0.95× the planned KV "
        "cache over 2 starts of this recipe: corrected KV cache ≈ 38.5 GiB, tokens ≈ 315,377 "
        "(planned 40.4 GiB, 330,636)."
    )
    assert c.text == expected

    client = client_as(operator)
    page = client.get(dense8b.get_absolute_url()).content.decode()
    assert expected in page  # in the memory plan of the recipe page
    assert page.count('class="plan-check-row"') == 2  # both starts, predicted beside measured

    # The planner preview (editor and wizard): another recipe on the same image is corrected
    # by these starts too, with this host's own numbers.
    form = {"gpu_memory_utilization": "0.50", "max_model_len": "8192", "max_num_seqs": "8",
            "kv_cache_dtype": "auto", "weight_format": "bf16", "total_params_b": "8",
            "num_layers": "32", "kv_heads": "8", "head_dim": "128", "image": dense8b.image}  # fmt: skip
    preview = client.post(reverse("recipe-plan"), form).content.decode()
    assert f"On {small_graphs_host.name} with {dense8b.image}, vLLM measured 0.95×" in preview
    assert "tokens ≈ 315,377" in preview
    other_image = client.post(reverse("recipe-plan"), {**form, "image": "example.org/x:1"})
    assert "vLLM measured" not in other_image.content.decode()
    wizard = client.post(reverse("recipe-wizard"), {**form, "step": "3", "action": "back"})
    assert "vLLM measured 0.95×" in wizard.content.decode()


def test_a_start_that_measured_nothing_records_nothing(sim_host, dense8b, operator, client_as):
    run = Run.objects.create(recipe=dense8b, host=sim_host, port=20001, image=dense8b.image,
                             state=RunState.READY, facts={"vllm_version": "0.33.0"})  # fmt: skip
    assert plan_check_record(run=run) == []
    assert not PlanCheck.objects.exists()
    page = client_as(operator).get(run.get_absolute_url()).content.decode()
    assert "the recipe as it is now" in page and "38.50 GiB" in page  # the live plan alone
    assert host_corrections(image=dense8b.image, arch=dense8b.architecture(),
                            flags=dense8b.flags()) == []  # fmt: skip


def test_a_hybrids_token_count_from_before_vllm_0_20_1_is_not_taken_for_the_plans(sim_host):
    """vLLM before 0.20.1 printed a hybrid's "GPU KV cache size" as blocks ÷ groups × block
    size (v1/core/kv_cache_utils.py), not concurrency × length: the planner's tokens are
    another number, so no ratio is recorded for them — the memory and the concurrency are."""
    recipe = Recipe.objects.create(
        name="Hybrid", slug="hybrid", model_id="acme/Hybrid-8B",
        gpu_memory_utilization=Decimal("0.50"), max_model_len=8192, max_num_seqs=4,
        total_params_b=8, weight_format="bf16", num_layers=48, kv_heads=2, head_dim=128,
        attention_layers=12, recurrent_state_mib=20,
    )  # fmt: skip
    facts = {"kv_cache_gib": 30.0, "kv_cache_tokens": 1_000_000, "max_concurrency": 40.0}
    for version, with_tokens in (("0.16.0", False), ("0.20.1", True)):
        run = Run.objects.create(recipe=recipe, host=sim_host, port=8000, image="img",
                                 state=RunState.STOPPED,
                                 facts={**facts, "vllm_version": version})  # fmt: skip
        quantities = {c.quantity for c in plan_check_record(run=run)}
        assert ("kv_cache_tokens" in quantities) is with_tokens, version
        assert {"kv_cache_gib", "max_concurrency"} <= quantities
