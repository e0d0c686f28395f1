"""Every way a recipe enters the panel is judged by the vLLM it will run on: its own parser
and registries (the contract), in vLLM's own words plus advice."""

from __future__ import annotations

import json

import pytest
import yaml
from django.urls import reverse

from apps.hosts.models import Host
from apps.recipes.forms import RecipeForm
from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipes_from_yaml, recipes_to_yaml
from apps.runs.services import RunRefused, run_create
from tests.conftest import child_env, manage
from tests.recipes.factories import make_recipe, recipe_data

pytestmark = pytest.mark.django_db


def test_the_form_refuses_nvfp4_in_vllms_words_with_advice():
    form = RecipeForm(recipe_data(quantization="nvfp4"))
    assert not form.is_valid()
    (message,) = form.errors["quantization"]
    assert message.startswith("vLLM 0.33.0: Unknown quantization method: nvfp4. Must be one of")
    assert "hf_quant_config.json" in message and "modelopt_fp4" in message
    assert RecipeForm(recipe_data(quantization="modelopt_fp4")).is_valid()


def test_an_unknown_reasoning_parser_is_refused_and_a_real_one_accepted():
    form = RecipeForm(recipe_data(reasoning_parser="nemotron"))
    assert not form.is_valid() and "nemotron_v3" in form.errors["reasoning_parser"][0]
    assert RecipeForm(recipe_data(reasoning_parser="nemotron_v3")).is_valid()


def test_the_default_hosts_version_decides(db):
    # step5 is a reasoning parser of vLLM 0.33.0 that 0.32.0 does not have.
    assert RecipeForm(recipe_data(reasoning_parser="step5")).is_valid()
    Host.objects.create(name="a-old-spark", vllm_version="0.32.0")
    form = RecipeForm(recipe_data(reasoning_parser="step5"))
    assert not form.is_valid()
    assert form.errors["reasoning_parser"][0].startswith("vLLM 0.32.0: --reasoning-parser")


def test_tensor_parallel_two_is_a_pair_recipe_and_more_is_refused():
    # 2 is a recipe for a pair of Sparks (admission then needs a pair); 3 or more needs GPUs
    # no Spark or pair has.
    assert RecipeForm(recipe_data(tensor_parallel_size="2")).is_valid()
    form = RecipeForm(recipe_data(tensor_parallel_size="4"))
    assert not form.is_valid()
    assert "a Spark has one and a pair of Sparks two" in form.errors["tensor_parallel_size"][0]


def test_a_start_checks_the_vllm_of_the_host_it_runs_on(operator):
    recipe = make_recipe(reasoning_parser="step5")  # valid for 0.33.0, the newest
    host = Host.objects.create(name="old-spark", vllm_version="0.32.0", engine="process",
                               simulated=True)  # fmt: skip
    with pytest.raises(RunRefused, match=r"old-spark's vLLM 0\.32\.0 would refuse") as caught:
        run_create(recipe=recipe, host=host, user=operator)
    assert caught.value.code == "unsafe_recipe"


def test_yaml_import_refuses_what_vllm_refuses_and_saves_nothing():
    text = recipes_to_yaml([make_recipe(name="Good", slug="good")])
    Recipe.objects.all().delete()
    doc = yaml.safe_load(text)
    assert doc["recipes"][0]["argv"][:2] == ["vllm", "serve"]
    doc["recipes"][0]["quantization"] = "nvfp4"
    result = recipes_from_yaml(yaml.safe_dump(doc))
    assert not result.ok and "Unknown quantization method: nvfp4" in str(result.problems)
    assert not Recipe.objects.exists()
    assert recipes_from_yaml(text).ok  # argv in an export is read-only, not an error


def test_the_wizard_refuses_nvfp4_and_keeps_what_was_typed(client_as, operator):
    response = client_as(operator).post(
        reverse("recipe-wizard"), recipe_data(step="3", action="save", quantization="nvfp4")
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Unknown quantization method: nvfp4" in html and 'value="nvfp4"' in html


def test_the_data_migration_fixes_stored_recipes_and_says_what_it_changed(tmp_path):
    # A database of its own, migrated as an upgrade would: to the old schema, a recipe the
    # old panel stored, then the new migrations.
    env = child_env(DATABASE_URL=f"sqlite:///{tmp_path / 'upgrade.sqlite3'}")
    manage("migrate", env=env)
    manage("migrate", "recipes", "0002_presets", env=env)  # back to the old schema
    manage("shell", env=env, stdin=(
        "from django.db import connection\n"
        "connection.cursor().execute(\"UPDATE recipes_recipe SET quantization='nvfp4', "
        "swap_space=4 WHERE slug='qwen3-5-35b-max-single-user'\")\n"
    ))  # fmt: skip
    manage("migrate", env=env)
    out = manage("shell", env=env, stdin=(
        "import json\nfrom apps.recipes.models import Recipe\n"
        "r = Recipe.objects.get(slug='qwen3-5-35b-max-single-user')\n"
        "print(json.dumps([r.quantization, r.upgrade_notes]))\n"
    ))  # fmt: skip
    quantization, notes = json.loads(out.strip().splitlines()[-1])
    assert quantization == ""
    assert any(n.startswith("Removed --swap-space 4:") for n in notes), notes
    assert any("nvfp4" in n and "detected from the checkpoint" in n for n in notes), notes


def test_the_recipe_page_says_which_vllm_accepts_it_and_what_an_upgrade_changed(client_as, member):
    recipe = make_recipe(upgrade_notes=["Removed --swap-space 0: vLLM 0.18 removed the option."])
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert "Accepted by the parser and registries of vLLM 0.33.0" in html
    assert "Removed --swap-space 0" in html
    # A host whose vLLM lacks what the recipe uses: the page says so, in vLLM's words.
    Recipe.objects.filter(pk=recipe.pk).update(reasoning_parser="step5")
    Host.objects.create(name="a-old-spark", vllm_version="0.32.0")
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert "vLLM 0.32.0 (on a-old-spark) would refuse this recipe" in html
    assert "--reasoning-parser: &#x27;step5&#x27;" in html
