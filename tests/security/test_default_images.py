"""Issue 38, finding 10: a host whose admin named no image runs the official vLLM images
only (`vllm/vllm-openai`, `nvcr.io/nvidia/vllm`), not any image.

Before, an empty `Host.image_allowlist` allowed every image, and a sparkrun recipe's
`container:` line imported without a word — a container that gets the GPU, HF_TOKEN and the
team's Hugging Face cache read-write. Now such an image is refused at admission and by the
Docker engine's own check, with how an admin allows it; an import keeps the image and says
it is not allowed on any host yet, and so does the recipe page.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.hosts.engines.base import EngineError, LaunchSpec
from apps.hosts.engines.docker import DockerEngine, image_allowed
from apps.hosts.models import Host
from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipes_from_yaml
from apps.runs.services import RunRefused, run_create
from tests.api.conftest import assert_error
from tests.recipes.factories import recipe_data

pytestmark = pytest.mark.django_db

FOREIGN = "evil/miner:latest"
OFFICIAL = [
    "vllm/vllm-openai:cu130-nightly", "vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:v1",
    f"vllm/vllm-openai@sha256:{'a' * 64}", "nvcr.io/nvidia/vllm:25.09-py3",
]  # fmt: skip
NOT_OFFICIAL = [
    FOREIGN, "vllm/vllm-openai-miner:latest", "vllm/vllm-openai/x:1", "nvcr.io/nvidia/vllm2:1",
    "localhost:5000/vllm/vllm-openai:dev", "127.0.0.1:5000/vllm/vllm-openai:v0.11.0",
    "scitrera/dgx-spark-vllm:0.16.0-t5", "vllm/vllm-openai:x --privileged",
]  # fmt: skip
NOTE = "not allowed on any host yet; an admin must allow it"
SPARKRUN = """
model: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4
runtime: vllm
container: {image}
defaults:
  gpu_memory_utilization: 0.8
  max_model_len: 8192
metadata:
  model_params: 30B
  model_dtype: nvfp4
"""


def _recipe(image: str, name: str = "Foreign image") -> Recipe:
    form = RecipeForm(data=recipe_data(name=name, image=image))
    assert form.is_valid(), form.errors  # a recipe may name any well-formed image
    return form.save()


def test_an_empty_allowlist_allows_the_official_vllm_images_only():
    for image in OFFICIAL:
        assert image_allowed([], image), image
    for image in NOT_OFFICIAL:
        assert not image_allowed([], image), image
    # An allowlist that names images decides alone: the admin's exact choice.
    assert image_allowed([FOREIGN], FOREIGN) and not image_allowed([FOREIGN], OFFICIAL[0])
    assert image_allowed(["evil/miner:*"], FOREIGN)


def test_a_foreign_image_is_refused_at_admission_on_a_host_with_an_empty_allowlist(
    sim_host, operator, api_as
):
    assert sim_host.image_allowlist == []
    recipe = _recipe(FOREIGN)
    with pytest.raises(RunRefused) as refused:
        run_create(recipe=recipe, host=sim_host, user=operator)
    message = str(refused.value)
    assert refused.value.code == "image_not_allowed"
    assert FOREIGN in message and "only the official vLLM images" in message
    assert "An admin allows it by adding it" in message and "evil/miner:*" in message
    error = assert_error(api_as(operator).post("/runs", {"recipe": recipe.slug,
                                                         "host": sim_host.name}), 422)  # fmt: skip
    assert error["code"] == "image_not_allowed" and "admin" in error["message"]
    # The admin allows it on this host: the same start is admitted.
    sim_host.image_allowlist = ["evil/miner:*"]
    sim_host.save()
    assert run_create(recipe=recipe, host=sim_host, user=operator).image == FOREIGN


def test_the_official_image_is_admitted_on_a_host_with_an_empty_allowlist(sim_host, operator):
    recipe = _recipe("vllm/vllm-openai:v0.11.0", name="Official image")
    assert run_create(recipe=recipe, host=sim_host, user=operator).image == recipe.image


def _spec(image: str) -> LaunchSpec:
    argv = ["vllm", "serve", "org/model", "--port", "8100", "--gpu-memory-utilization", "0.80"]
    return LaunchSpec(run_id=7, host_name="spark-1", argv=argv, image=image, port=8100)


class NoDocker:
    def __getattr__(self, name):
        raise AssertionError(f"the engine touched Docker ({name}) for a refused image")


def test_the_docker_engine_refuses_a_foreign_image_itself_before_pull_and_create():
    engine = DockerEngine(host_name="spark-1", client=NoDocker())
    for call in (engine.container_config, engine.pull):
        with pytest.raises(EngineError, match=r"not on spark-1's allowlist.*official vLLM images"):
            call(_spec(FOREIGN))
    assert engine.container_config(_spec(OFFICIAL[0]))["image"] == OFFICIAL[0]


def test_a_simulated_host_judges_the_recipes_image_and_runs_its_admins_own():
    """Simulated hosts are not exempt: the recipe's image meets the Spark's rule (so the
    simulation refuses what a Spark would); the image sparksim runs in is the host's own
    setting, an admin's like the allowlist (a local registry's here)."""
    local = "127.0.0.1:5000/vllm/vllm-openai:v0.11.0"
    engine = DockerEngine(host_name="sim-1", simulated=True, sim_image=local, gpus=False,
                          client=NoDocker())  # fmt: skip
    assert engine.container_config(_spec(OFFICIAL[0]))["image"] == local
    with pytest.raises(EngineError, match="allowlist"):
        engine.container_config(_spec(FOREIGN))


def test_a_sparkrun_import_with_a_foreign_container_keeps_it_and_says_so(
    sim_host, operator, client_as, api_as
):
    result = recipes_from_yaml(SPARKRUN.format(image=FOREIGN))
    assert result.ok, result.problems
    [recipe] = result.created
    assert recipe.image == FOREIGN  # kept as the recipe wrote it
    [note] = [n for n in result.notes if NOTE in n]
    assert note.startswith(recipe.name) and FOREIGN in note
    # The page shows it beside the image; the API's import result carries it too.
    page = client_as(operator).get(recipe.get_absolute_url()).content.decode()
    assert 'id="image-note"' in page and NOTE in page
    text = SPARKRUN.format(image="other/foreign:1").replace("Nano-30B", "Nano-31B")
    response = api_as(operator).post("/recipes/import", {"yaml": text})
    assert response.status_code == 200, response.data
    assert any(NOTE in n and "other/foreign:1" in n for n in response.data["notes"])
    # An admin allows it on a host: the note goes, and the start is admitted.
    sim_host.image_allowlist = [FOREIGN]
    sim_host.save()
    page = client_as(operator).get(recipe.get_absolute_url()).content.decode()
    assert 'id="image-note"' not in page
    assert run_create(recipe=recipe, host=sim_host, user=operator).image == FOREIGN


def test_the_import_page_shows_the_note(sim_host, operator, client_as):
    response = client_as(operator).post(reverse("recipe-import"),
                                        {"text": SPARKRUN.format(image=FOREIGN)}, follow=True)  # fmt: skip
    assert response.status_code == 200
    assert NOTE in response.content.decode()


def test_an_official_container_imports_without_a_note(sim_host):
    result = recipes_from_yaml(SPARKRUN.format(image="nvcr.io/nvidia/vllm:25.09-py3"))
    assert result.ok and not [n for n in result.notes if NOTE in n], result.notes


def test_with_no_host_yet_a_foreign_image_gets_the_note_and_an_official_one_does_not():
    assert not Host.objects.exists()
    assert any(NOTE in n for n in recipes_from_yaml(SPARKRUN.format(image=FOREIGN)).notes)
    official = SPARKRUN.format(image=OFFICIAL[0]).replace("Nano-30B", "Nano-32B")
    assert not any(NOTE in n for n in recipes_from_yaml(official).notes)
