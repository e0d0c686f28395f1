"""Export to sparkrun (issue 39): a recipe's sparkrun YAML renders into the same `vllm serve`
command the panel runs, and the panel's importer reads it back into the same recipe."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

from apps.recipes.models import Recipe
from apps.recipes.yaml_io import recipe_to_sparkrun_yaml, recipes_from_yaml
from sparkdomain.command import serve_argv
from sparkdomain.sparkrun import parse_sparkrun
from sparkdomain.sparkrun.placeholders import render
from sparkdomain.sparkrun.vector import split_command
from tests.recipes.factories import make_recipe

pytestmark = pytest.mark.django_db

SPEC = '{"method":"mtp","num_speculative_tokens":2}'


def community_recipe() -> Recipe:
    return make_recipe(
        name="Exported", description="a recipe to export", served_model_name="moe org/moe-nvfp4",
        gpu_memory_utilization=Decimal("0.825"), max_model_len=-1, max_num_seqs=None,
        kv_cache_dtype="fp8_ds_mla", tensor_parallel_size=2, tool_call_parser="hermes",
        reasoning_parser="qwen3", revision="0123456789abcdef0123456789abcdef01234567",
        extra_args=["--speculative-config", SPEC, "--trust-remote-code",
                    "--hf-overrides", '{"rope_scaling":{"factor":2}}',
                    "--default-chat-template-kwargs.enable_thinking=false"],
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
        mods=[{"kind": "mod", "name": "mods/fix"}, {"kind": "command", "text": "cd /w"}],
        source={"format": "sparkrun", "metadata": {"tags": ["moe"], "author": "someone"},
                "maintainer": "someone"},
        total_params_b=35.0, active_params_b=3.0, weight_format="nvfp4",
    )  # fmt: skip


def test_the_export_renders_into_the_panels_own_vector() -> None:
    recipe = community_recipe()
    doc = yaml.safe_load(recipe_to_sparkrun_yaml(recipe))
    chain = {**doc["defaults"], "model": doc["model"]}
    serve, before = split_command(render(doc["command"], chain))
    ours = serve_argv(recipe, host="0.0.0.0", port=8000)  # noqa: S104 (sparkrun's own)
    assert serve[:3] == ours[:3]
    # The same options: the panel puts the address first, sparkrun's template after serve.
    assert sorted(serve[3:]) == sorted(ours[3:])
    assert before == ["cd /w"]
    assert doc["defaults"]["tensor_parallel"] == 2  # sparkrun places it on two nodes
    assert doc["metadata"]["model_params"] == "35B" and doc["metadata"]["tags"] == ["moe"]
    assert doc["mods"] == ["mods/fix"] and doc["maintainer"] == "someone"


def test_the_export_imports_back_into_the_same_recipe() -> None:
    recipe = community_recipe()
    parsed = parse_sparkrun(yaml.safe_load(recipe_to_sparkrun_yaml(recipe)))
    assert parsed.errors == {}
    fields = parsed.fields
    for name in ("model_id", "revision", "served_model_name", "max_model_len", "kv_cache_dtype",
                 "tensor_parallel_size", "tool_call_parser", "reasoning_parser", "extra_args",
                 "env", "total_params_b", "active_params_b", "weight_format"):  # fmt: skip
        assert fields[name] == getattr(recipe, name), name
    assert Decimal(fields["gpu_memory_utilization"]) == recipe.gpu_memory_utilization
    assert "max_num_seqs" not in fields  # left to vLLM both ways
    assert fields["mods"] == recipe.mods
    assert fields["source"]["metadata"]["tags"] == ["moe"]
    assert fields["source"]["maintainer"] == "someone"


def test_an_imported_then_exported_recipe_imports_unchanged_through_the_panel() -> None:
    recipe = community_recipe()
    text = recipe_to_sparkrun_yaml(recipe)
    argv = serve_argv(recipe)
    Recipe.objects.all().delete()
    result = recipes_from_yaml(text)
    assert result.ok, result.problems
    (again,) = result.created
    assert serve_argv(again) == argv
    assert recipe_to_sparkrun_yaml(again) == text


def test_the_export_view_gives_one_sparkrun_recipe(client, operator) -> None:
    recipe = community_recipe()
    client.force_login(operator)
    response = client.get(f"/recipes/export/?slug={recipe.slug}&format=sparkrun")
    assert response.status_code == 200
    assert 'filename="exported.sparkrun.yaml"' in response["Content-Disposition"]
    assert yaml.safe_load(response.content)["runtime"] == "vllm"
    assert client.get("/recipes/export/?format=sparkrun").status_code == 400


def test_real_sparkrun_renders_the_export_into_the_panels_command(tmp_path) -> None:
    """sparkrun 0.4.2 itself (tools/sparkrun_env.sh) on the exported file: the command it
    would run is the panel's vector (address and port aside) — vLLM reads the same options."""
    from tests.recipes.sparkrun_real import sparkrun_commands

    recipe = community_recipe()
    path = tmp_path / "exported.yaml"
    path.write_text(recipe_to_sparkrun_yaml(recipe))
    (theirs,) = sparkrun_commands([path]).values()
    assert theirs.get("runtime") == "vllm-distributed", theirs
    serve, before = split_command(theirs["command"])
    ours = serve_argv(recipe, host="0.0.0.0", port=8000)  # noqa: S104 (sparkrun's own)
    assert serve[:3] == ours[:3]
    assert sorted(serve[3:]) == sorted(ours[3:])
    assert before == ["cd /w"]
