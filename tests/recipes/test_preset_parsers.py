"""Issue 42: recipes serve the tool calls coding agents send. vLLM answers a chat request that
carries `tools` with HTTP 400 unless it runs with `--enable-auto-tool-choice` and
`--tool-call-parser`, so the presets (and the wizard's models) carry the parsers their makers
publish — names checked against vLLM 0.33's own registries, as its contract recorded them —
a tool-call parser adds both flags, and the recipe page says whether tool calls are served."""

from __future__ import annotations

import importlib
import json

import httpx
import pytest
from django.urls import reverse

from apps.recipes.models import Recipe
from sparkdomain import presets
from sparkdomain.command import serve_argv, tool_calling
from sparkdomain.sparkrun import parse_sparkrun
from tests.conftest import child_env, manage
from tests.recipes.factories import make_recipe, recipe_data
from vllm_adapter import contract as vllm_contract

pytestmark = pytest.mark.django_db

VLLM = "0.33.0"
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the project.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def registries() -> vllm_contract.Contract:
    """vLLM 0.33's parser registries, as tools/vllm_contract.py read them out of it."""
    contract = vllm_contract.load(VLLM)
    assert contract.tool_parsers and contract.reasoning_parsers  # recorded, not empty
    return contract


def after(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


# --- the presets' commands -----------------------------------------------------------------


def test_every_preset_serves_tool_calls_with_parsers_vllm_registers():
    contract = registries()
    rows = list(Recipe.objects.presets())
    assert {r.slug for r in rows} == {r["slug"] for r in presets.RECIPES}
    for recipe in rows:
        argv = serve_argv(recipe)
        assert argv.count("--enable-auto-tool-choice") == 1, recipe.slug
        tool = after(argv, "--tool-call-parser")
        assert tool and tool in contract.tool_parsers, (recipe.slug, tool)
        reasoning = after(argv, "--reasoning-parser")
        assert reasoning is None or reasoning in contract.reasoning_parsers, (
            recipe.slug,
            reasoning,
        )
        assert contract.check(argv) == [], recipe.slug  # vLLM 0.33's parser takes the vector
        assert tool_calling(argv)["served"], recipe.slug


def test_the_presets_carry_their_makers_parsers():
    found = {r.slug: (r.reasoning_parser, r.tool_call_parser) for r in Recipe.objects.presets()}
    assert found == {
        "nemotron-3-super-official": ("nemotron_v3", "qwen3_coder"),
        "120b-moe-safest": ("nemotron_v3", "qwen3_coder"),
        "qwen3-5-35b-max-single-user": ("qwen3", "qwen3_coder"),
        "70b-dense-max-concurrent": ("", "llama3_json"),  # Llama 3.3 does not reason
    }
    # The upgrade migration wrote this release's values out: the same ones.
    upgrade = importlib.import_module("apps.recipes.migrations.0013_preset_parsers")
    now = {r["slug"]: (r["model_id"], r["reasoning_parser"], r["tool_call_parser"])
           for r in presets.RECIPES}  # fmt: skip
    assert now == upgrade.PARSERS


def test_every_wizard_model_names_parsers_vllm_registers():
    contract = registries()
    for key in presets.MODELS:
        parsers = presets.parsers_of(key)
        assert parsers["tool_call_parser"] in contract.tool_parsers, key
        reasoning = parsers["reasoning_parser"]
        assert reasoning == "" or reasoning in contract.reasoning_parsers, key
    assert presets.parsers_of("gpt-oss-120b") == {
        "reasoning_parser": "openai_gptoss",
        "tool_call_parser": "openai",
    }


def test_a_wizard_model_fills_its_parsers(client_as, member):
    html = (
        client_as(member)
        .post(reverse("recipe-wizard"), recipe_data(step="1", action="model:qwen3-32b-bf16"))
        .content.decode()
    )
    assert 'name="tool_call_parser" value="hermes"' in html
    assert 'name="reasoning_parser" value="qwen3"' in html
    # Another model replaces them: Llama 3.3 has no reasoning parser.
    html = (
        client_as(member)
        .post(
            reverse("recipe-wizard"),
            recipe_data(step="1", action="model:llama-3.3-70b-nvfp4", reasoning_parser="qwen3"),
        )
        .content.decode()
    )
    assert 'name="tool_call_parser" value="llama3_json"' in html
    assert 'name="reasoning_parser" value="qwen3"' not in html


# --- the command: a tool-call parser turns auto tool choice on ------------------------------


def test_a_tool_call_parser_adds_auto_tool_choice_once_and_extra_arguments_decide():
    plain = serve_argv(make_recipe(name="Plain"))
    assert "--enable-auto-tool-choice" not in plain and "--tool-call-parser" not in plain
    argv = serve_argv(make_recipe(name="Hermes", tool_call_parser="hermes"))
    at = argv.index("--enable-auto-tool-choice")
    assert argv[at : at + 3] == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    # An older recipe that carries the switch itself: not given twice.
    argv = serve_argv(
        make_recipe(name="Old", tool_call_parser="hermes", extra_args=["--enable-auto-tool-choice"])
    )
    assert argv.count("--enable-auto-tool-choice") == 1
    # Turned off on purpose: left off, and then no tool parser is served.
    argv = serve_argv(
        make_recipe(
            name="Off", tool_call_parser="hermes", extra_args=["--disable-auto-tool-choice"]
        )
    )
    assert "--enable-auto-tool-choice" not in argv
    assert tool_calling(argv) == {
        "tool_call_parser": "hermes",
        "auto_tool_choice": False,
        "reasoning_parser": "",
        "served": False,
    }


def test_a_sparkrun_command_with_both_flags_imports_as_the_parser_field():
    doc = {
        "model": "Qwen/Qwen3-32B",
        "runtime": "vllm",
        "defaults": {"gpu_memory_utilization": 0.85},
        "command": "vllm serve {model} --gpu-memory-utilization {gpu_memory_utilization} "
        "--enable-auto-tool-choice --tool-call-parser hermes --trust-remote-code",
    }
    fields = parse_sparkrun(doc).fields
    assert fields["tool_call_parser"] == "hermes"
    assert fields["extra_args"] == ["--trust-remote-code"]  # the field adds the switch back
    # Without a tool-call parser the switch is an ordinary option, kept where it was.
    doc["command"] = "vllm serve {model} --gpu-memory-utilization 0.85 --enable-auto-tool-choice"
    assert parse_sparkrun(doc).fields["extra_args"] == ["--enable-auto-tool-choice"]


# --- the recipe page -----------------------------------------------------------------------


def test_the_recipe_page_says_tool_calls_are_served_and_by_which_parsers(client_as, member):
    recipe = Recipe.objects.get(slug="nemotron-3-super-official")
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert (
        '<dd data-testid="recipe-tool-calls">served (tool-call parser <code>qwen3_coder</code>, '
        "auto tool choice)</dd>" in html
    )
    assert 'data-testid="recipe-reasoning">reasoning parser <code>nemotron_v3</code>' in html
    assert "--enable-auto-tool-choice \\\n  --tool-call-parser qwen3_coder" in html  # the command


def test_the_recipe_page_says_tool_calls_are_not_served_without_a_parser(client_as, member):
    recipe = make_recipe(name="No tools")
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert (
        '<dd data-testid="recipe-tool-calls">not served — vLLM answers a chat request carrying '
        "<code>tools</code> with HTTP 400; coding agents need a tool-call parser</dd>" in html
    )
    assert 'data-testid="recipe-reasoning"' not in html
    recipe.tool_call_parser = "hermes"
    recipe.extra_args = ["--disable-auto-tool-choice"]
    recipe.save()
    html = client_as(member).get(recipe.get_absolute_url()).content.decode()
    assert "not served — the extra arguments turn auto tool choice off" in html


# --- existing installs ---------------------------------------------------------------------


def test_an_upgrade_gives_the_presets_their_parsers_but_keeps_an_operators_edit(tmp_path):
    # An install whose presets were created without parsers: migrated back to the schema
    # before 0013, its presets' parsers blanked as the old release made them, one edited.
    env = child_env(DATABASE_URL=f"sqlite:///{tmp_path / 'upgrade.sqlite3'}")
    manage("migrate", env=env)
    manage("migrate", "recipes", "0012_model_facts", env=env)
    manage("shell", env=env, stdin=(
        "from django.db import connection\n"
        "c = connection.cursor()\n"
        "c.execute(\"UPDATE recipes_recipe SET reasoning_parser='', tool_call_parser='' "
        "WHERE is_preset\")\n"
        "c.execute(\"UPDATE recipes_recipe SET tool_call_parser='hermes' "
        "WHERE slug='qwen3-5-35b-max-single-user'\")\n"
        "c.execute(\"UPDATE recipes_recipe SET model_id='org/other-model' "
        "WHERE slug='120b-moe-safest'\")\n"
    ))  # fmt: skip
    manage("migrate", env=env)
    out = manage("shell", env=env, stdin=(
        "import json\nfrom apps.recipes.models import Recipe\n"
        "print(json.dumps({r.slug: [r.reasoning_parser, r.tool_call_parser, r.upgrade_notes] "
        "for r in Recipe.objects.filter(is_preset=True)}))\n"
    ))  # fmt: skip
    found = json.loads(out.strip().splitlines()[-1])
    reasoning, tool, notes = found["nemotron-3-super-official"]
    assert (reasoning, tool) == ("nemotron_v3", "qwen3_coder")
    assert notes[-1].startswith(
        "Added the tool-call parser qwen3_coder (with --enable-auto-tool-choice, which vLLM "
        "needs with it) and the reasoning parser nemotron_v3: without a tool-call parser vLLM "
        "answers a chat request carrying `tools`"
    ), notes
    assert found["70b-dense-max-concurrent"][:2] == ["", "llama3_json"]
    # The operator's parser stays; only the blank reasoning parser is filled in.
    reasoning, tool, notes = found["qwen3-5-35b-max-single-user"]
    assert (reasoning, tool) == ("qwen3", "hermes")
    assert notes[-1].startswith("Added the reasoning parser qwen3:"), notes
    # A preset an operator made serve another model is left alone.
    assert found["120b-moe-safest"][:2] == ["", ""]


# --- sparksim: what a preset's command answers ---------------------------------------------


def test_each_presets_command_in_sparksim_answers_a_request_with_tools(tmp_path):
    from tests.conftest import free_port
    from tests.sparksim.conftest import launch

    for recipe in Recipe.objects.presets():
        argv = serve_argv(recipe, host="127.0.0.1", port=free_port())
        sim = launch(tmp_path, *argv[3:], model=argv[2], time_scale=20)
        try:
            body = {
                "model": argv[2],
                "messages": [{"role": "user", "content": "Open README.md"}],
                "max_tokens": 4,
                "tools": [TOOL],  # tool_choice unset: "auto", as coding agents send it
            }
            response = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=60)
            assert response.status_code == 200, (recipe.slug, response.text)
        finally:
            sim.stop()
