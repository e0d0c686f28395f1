"""Community recipes through the panel's real doors (issue 39): the API and the browser
import, what a recipe keeps (provenance, mods, environment), what a start does with them,
and what the planner makes of what a recipe leaves to vLLM."""

from __future__ import annotations

import pytest
import yaml

from apps.recipes.models import Recipe
from apps.runs.models import Run
from apps.runs.services import RunRefused, recipe_environment, run_start
from sparkdomain import spark
from sparkdomain.env_rules import env_problems, variable_problem
from tests.api.conftest import api_client
from tests.recipes.factories import make_recipe

pytestmark = pytest.mark.django_db

COMMUNITY = """
recipe_version: "2"
name: community-moe
model: Org/Moe-35B-A3B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
maintainer: someone
metadata: {author: someone, tags: [moe], model_params: 35B-A3B, num_layers: 40,
           num_kv_heads: 2, head_dim: 256, model_dtype: nvfp4}
mods: [mods/fix-template]
env: {VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1", LD_PRELOAD: /x.so}
defaults: {port: 8000, host: 0.0.0.0, gpu_memory_utilization: 0.825, max_num_seqs: 4}
command: |
  vllm serve {model} --host {host} --port {port} \\
    --gpu-memory-utilization {gpu_memory_utilization} --max-num-seqs {max_num_seqs} \\
    --max-model-len auto --enable-auto-tool-choice --tool-call-parser hermes \\
    --load-format instanttensor
variants:
  wide: {max_num_seqs: 16, description: more lanes}
  frozen: {gpu_memory_utilization: 0.95}
"""


def test_the_api_imports_a_community_recipe_whole(operator) -> None:
    api = api_client(operator)
    response = api.post("/recipes/import", {"yaml": COMMUNITY, "replace": False})
    assert response.status_code == 200, response.content[:2000]
    body = response.data
    assert body["created"] == ["community-moe", "community-moe-wide"]
    # The variant that breaks the 0.90 rule is a note, not a failed import.
    assert any("frozen" in n and "0.90" in n for n in body["notes"]), body["notes"]
    assert any("LD_PRELOAD does not tune vLLM" in n for n in body["notes"])
    recipe = api.get("/recipes/community-moe").data
    assert recipe["gpu_memory_utilization"] == 0.825
    assert recipe["max_model_len"] == -1 and recipe["max_num_seqs"] == 4
    assert recipe["env"] == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
    assert recipe["mods"] == [{"kind": "mod", "name": "mods/fix-template"}]
    assert recipe["source"]["metadata"]["tags"] == ["moe"]
    assert (recipe["total_params_b"], recipe["active_params_b"]) == (35.0, 3.0)
    argv = recipe["argv"]
    for option in (["--gpu-memory-utilization", "0.825"], ["--max-model-len", "auto"],
                   ["--load-format", "instanttensor"], ["--enable-auto-tool-choice"]):  # fmt: skip
        at = argv.index(option[0])
        assert argv[at : at + len(option)] == option, argv
    assert api.get("/recipes/community-moe-wide").data["max_num_seqs"] == 16


def test_the_browser_form_imports_the_same_and_the_page_shows_provenance(client, operator):
    client.force_login(operator)
    response = client.post("/recipes/import/", {"text": COMMUNITY})
    assert response.status_code == 302
    page = client.get("/recipes/community-moe/").content.decode()
    assert 'id="recipe-source"' in page and "someone" in page
    assert 'id="recipe-mods"' in page and "mods/fix-template" in page
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in page
    assert "auto (the longest that fits)" in page


def test_a_recipe_with_mods_is_refused_at_start_saying_which(sim_host, operator) -> None:
    recipe = make_recipe(
        name="Modded",
        mods=[{"kind": "mod", "name": "mods/fix-x"}, {"kind": "command", "text": "pip install y"}],
    )
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=recipe, host=sim_host, user=operator)
    assert refused.value.code == "mods_not_allowed"
    assert "command 'pip install y'" in str(refused.value)  # code SparkPanel never runs
    assert not Run.objects.exists()


def test_a_start_gives_the_server_the_recipes_environment_judged_again(settings) -> None:
    settings.VLLM_ENV = {"VLLM_WORKER_SET": "panel"}
    recipe = make_recipe(name="Env", env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    # A row saved before a rule changed, or behind the validators' back.
    Recipe.objects.filter(pk=recipe.pk).update(
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "VLLM_WORKER_SET": "recipe",
             "LD_PRELOAD": "/x.so", "VLLM_API_KEY": "stolen"}
    )  # fmt: skip
    recipe.refresh_from_db()
    assert recipe_environment(recipe) == {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}


@pytest.mark.parametrize(
    "name, value, why",
    [
        ("VLLM_PLUGINS", "x", "loads a plugin"),
        ("VLLM_TORCH_PROFILER_DIR", "/tmp", "names a file or folder"),
        ("NCCL_SOCKET_IFNAME", "eth0", "picks the network interfaces"),
        ("VLLM_RPC_BASE_PATH", "/tmp", "names a file or folder"),
        ("VLLM_CPU_KVCACHE_SPACE", "40", "sizes memory"),
        ("HF_TOKEN", "hf_x", "does not tune vLLM"),
        ("VLLM_API_KEY", "k", "the panel's"),
        ("CUDA_VISIBLE_DEVICES", "1", "the panel's"),
        ("lower_case", "1", "upper-case letters"),
        ("VLLM_X", "a\nb", "control character"),
    ],
)
def test_environment_variables_outside_the_rules_are_refused_with_the_reason(name, value, why):
    assert why in (variable_problem(name, value) or "")


def test_environment_variables_that_only_tune_vllm_are_kept() -> None:
    env = {"VLLM_USE_FLASHINFER_MOE_FP4": "1", "NCCL_IB_DISABLE": "0", "NCCL_NET_PLUGIN": "none",
           "TORCH_CUDA_ARCH_LIST": "12.1a", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "FLASHINFER_CUDA_ARCH_LIST": "12.1a", "OMP_NUM_THREADS": 8}  # fmt: skip
    assert env_problems(env) == []
    assert env_problems({f"VLLM_V{i}": "1" for i in range(65)}) == ["at most 64 variables"]


def test_what_a_recipe_leaves_to_vllm_is_planned_as_vllm_decides_it() -> None:
    recipe = make_recipe(name="Defaults", max_model_len=None, max_num_seqs=None)
    plan = recipe.plan()
    assert any("max model len is blank" in u for u in plan.unknowns), plan.unknowns
    assert recipe.flags().max_num_seqs == spark.VLLM_DEFAULT_MAX_NUM_SEQS == 256
    recipe.max_position_embeddings = 32768
    assert recipe.flags().max_model_len == 32768
    assert recipe.plan().kv_needed_bytes is not None
    recipe.max_model_len = -1  # auto: the model's own context at most
    assert recipe.flags().max_model_len == 32768


def test_three_decimals_and_every_kv_dtype_of_the_host_vllm_save() -> None:
    recipe = make_recipe(name="Precise", gpu_memory_utilization="0.825", kv_cache_dtype="nvfp4")
    recipe.refresh_from_db()
    assert str(recipe.gpu_memory_utilization) == "0.825"
    from sparkdomain.command import serve_argv

    argv = serve_argv(recipe)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.825"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "nvfp4"
    # Four decimals are not a utilization anyone writes: the field keeps three.
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        make_recipe(name="Too precise", gpu_memory_utilization="0.8255")


def test_an_export_of_the_import_is_loaded_by_yaml() -> None:
    make_recipe(name="Plain")
    from apps.recipes.yaml_io import recipe_to_sparkrun_yaml

    doc = yaml.safe_load(recipe_to_sparkrun_yaml(Recipe.objects.get(name="Plain")))
    assert doc["runtime"] == "vllm" and doc["command"].startswith("vllm serve {model}")


def test_the_speculative_decoding_a_recipe_asks_for_is_read_as_vllm_merges_it() -> None:
    recipe = make_recipe(name="Spec", extra_args=[
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}',
        "--speculative-config.num_speculative_tokens=3",
    ])  # fmt: skip
    assert recipe.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}
    assert make_recipe(name="None").speculative_config is None


@pytest.mark.parametrize("written", ["0", "-5", "lots", "10000001"])
def test_a_max_model_len_that_is_no_length_auto_or_blank_is_refused(written) -> None:
    from apps.recipes.forms import RecipeForm
    from tests.recipes.factories import recipe_data

    form = RecipeForm(recipe_data(max_model_len=written))
    assert not form.is_valid() and "max_model_len" in form.errors
    for good, stored in (("auto", -1), ("", None), ("4096", 4096)):
        form = RecipeForm(recipe_data(name=f"ok {good}", max_model_len=good))
        assert form.is_valid(), form.errors
        assert form.cleaned_data["max_model_len"] == stored


def test_the_recipe_page_shows_the_speculative_decoding(client, operator) -> None:
    recipe = make_recipe(name="Spec page", extra_args=[
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'])  # fmt: skip
    client.force_login(operator)
    page = client.get(recipe.get_absolute_url()).content.decode()
    assert 'id="recipe-speculative"' in page and "num_speculative_tokens 2" in page
