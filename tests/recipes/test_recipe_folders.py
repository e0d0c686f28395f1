"""Folders a recipe reads (issue 39): a sparkrun recipe that serves its draft model from a
folder it mounts (`volumes: [~/models/draft:/drafter]`, `"model": "/drafter"`) imports with
its command unchanged; SparkPanel never mounts the recipe's volumes, so a start needs the
host's own model folder at that path, which only an admin sets."""

from __future__ import annotations

import pytest
import yaml
from django.core.exceptions import ValidationError

from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipe_to_sparkrun_yaml, recipes_from_yaml, recipes_to_yaml
from apps.runs.models import Run
from apps.runs.services import RunRefused, run_start
from tests.api.conftest import api_client

pytestmark = pytest.mark.django_db

SPEC = '{"model":"/drafter","num_speculative_tokens":4,"method":"dflash"}'
DRAFTED = f"""
recipe_version: "2"
name: drafted
model: Org/Big-Model-NVFP4
draft_model: Org/Big-Model-DFlash
runtime: vllm
container: vllm/vllm-openai:v0.33.0
defaults: {{port: 8000, host: 0.0.0.0, gpu_memory_utilization: 0.8, max_model_len: 32768,
           speculative_config: '{SPEC}'}}
volumes:
  - ~/models/Big-Model-NVFP4:/model:ro
  - ~/models/Big-Model-DFlash:/drafter:ro
  - ~/.cache/huggingface:/root/.cache/huggingface
command: |
  vllm serve /model --host {{host}} --port {{port}} \\
    --gpu-memory-utilization {{gpu_memory_utilization}} --max-model-len {{max_model_len}} \\
    --speculative-config '{{speculative_config}}'
"""


def _imported(operator) -> dict:
    api = api_client(operator)
    response = api.post("/recipes/import", {"yaml": DRAFTED, "replace": False})
    assert response.status_code == 200, response.content[:2000]
    assert any("folders /drafter" in n and "Org/Big-Model-DFlash" in n
               for n in response.data["notes"]), response.data["notes"]  # fmt: skip
    return api.get("/recipes/drafted").data


def test_the_command_keeps_the_folder_and_the_recipe_says_it_needs_it(operator) -> None:
    recipe = _imported(operator)
    argv = recipe["argv"]
    assert argv[2] == "Org/Big-Model-NVFP4"  # the model itself comes from the Hub
    assert argv[argv.index("--speculative-config") + 1] == SPEC  # the draft: as written
    assert recipe["folders"] == [{"path": "/drafter", "source": "~/models/Big-Model-DFlash"}]


def test_a_start_needs_the_hosts_model_folder_there(sim_host, operator) -> None:
    _imported(operator)
    recipe = Recipe.objects.get(slug="drafted")
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=recipe, host=sim_host, user=operator)
    assert refused.value.code == "folder_missing"
    message = str(refused.value)
    assert "/drafter" in message and "~/models/Big-Model-DFlash" in message
    assert f"{sim_host.name}'s model folders" in message
    assert not Run.objects.exists()

    sim_host.model_folders = ["/drafter"]  # a local server: the folder where it lies
    sim_host.full_clean()
    sim_host.save()
    try:
        run_start(recipe=recipe, host=sim_host, user=operator)
    except RunRefused as other:  # admission may refuse for its own reasons, never this one
        assert other.code != "folder_missing", other


def test_a_path_outside_every_folder_is_still_refused(operator) -> None:
    text = DRAFTED.replace("~/models/Big-Model-DFlash:/drafter:ro", "/srv/other:/other")
    result = recipes_from_yaml(text)
    assert not result.ok
    shown = str(result.problems)
    assert "/drafter" in shown, shown
    assert "outside the model directories" in shown or "no model directory" in shown, shown
    assert not Recipe.objects.filter(name="drafted").exists()


def test_folders_survive_the_panels_yaml_and_the_sparkrun_export(operator) -> None:
    _imported(operator)
    recipe = Recipe.objects.get(slug="drafted")
    text = recipes_to_yaml([recipe])
    exported = yaml.safe_load(recipe_to_sparkrun_yaml(recipe))
    assert exported["volumes"] == ["~/models/Big-Model-DFlash:/drafter:ro"]
    recipe.delete()
    result = recipes_from_yaml(text)
    assert result.ok, result.problems
    (again,) = result.created
    assert again.folders == recipe.folders and again.extra_args == recipe.extra_args


def test_a_recipe_cannot_claim_a_system_folder() -> None:
    text = recipe_yaml_with_folders([{"path": "/usr/lib/python3", "source": "x"}])
    result = recipes_from_yaml(text)
    assert not result.ok and "system directory" in str(result.problems)


def recipe_yaml_with_folders(folders: list) -> str:
    return yaml.safe_dump({"recipes": [{
        "name": "Foldered", "model_id": "Org/Big-Model-NVFP4", "gpu_memory_utilization": 0.8,
        "max_model_len": 8192, "folders": folders,
    }]})  # fmt: skip


@pytest.mark.parametrize(
    ("folders", "engine", "why"),
    [
        (["/etc:/models"], "docker", "host folder '/etc'"),
        (["/data/m:/usr/local/lib"], "docker", "container path '/usr/local/lib'"),
        (["/data/m:/m:rw"], "docker", "always read-only"),
        (["/data/m:/m", "/data/n:/m/x"], "docker", "overlap"),
        (["/data/m:/root/.cache/huggingface"], "docker", "container path '/root/.cache"),
        (["/data/m:/m"], "process", "give one path"),
        (["~/models:/m"], "docker", "host folder '~/models'"),
    ],
)
def test_an_admin_model_folder_is_judged(folders, engine, why) -> None:
    host = Host(name="judged", engine=engine, model_folders=folders)
    with pytest.raises(ValidationError) as refused:
        host.full_clean()
    assert why in str(refused.value)


def test_a_hosts_model_folders_are_its_model_directories() -> None:
    docker = Host(name="d", engine="docker", hf_cache_path="/srv/hf",
                  model_folders=["/data/models/draft:/drafter", "/data/tok"])  # fmt: skip
    docker.full_clean()
    assert docker.model_dirs() == ("/root/.cache/huggingface", "/drafter/", "/data/tok/")
    assert docker.model_folder_at("/drafter/sub") == "/drafter"
    assert docker.model_folder_at("/draft") is None
    local = Host(name="p", engine="process", model_folders=["/data/tok"])
    assert local.model_dirs() == ("/data/tok/",)


def test_the_recipe_page_says_which_hosts_have_its_folders(client, operator, sim_host) -> None:
    _imported(operator)
    client.force_login(operator)
    page = client.get("/recipes/drafted/").content.decode()
    assert 'id="recipe-folders"' in page and "no host has it yet" in page
    assert "~/models/Big-Model-DFlash" in page
    assert "/drafter" in page.split('id="serve-command"')[1].split("</pre>")[0]
    Host.objects.filter(pk=sim_host.pk).update(model_folders=["/drafter"])
    page = client.get("/recipes/drafted/").content.decode()
    assert f"on {sim_host.name}" in page.split('id="recipe-folders"')[1].split("</div>")[0]
