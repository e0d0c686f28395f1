"""The presets' tool-call and reasoning parsers for installs whose presets were created before
the presets carried them (0002 creates the presets once; it is not run again).

Without a tool-call parser vLLM answers a chat request carrying `tools` — what coding
agents send — with HTTP 400 ("auto" tool choice requires --enable-auto-tool-choice and
--tool-call-parser to be set). Only a preset row that still serves its own model gets a
parser, and only a parser field that is still blank: an operator's edit is never replaced.
Each recipe changed says so in its upgrade notes.

The values are this release's (sparkdomain/presets.py), written out here so the migration
does the same whatever later releases change there."""

from django.db import migrations

# slug → (the preset's model, reasoning parser, tool-call parser); names vLLM 0.33 registers.
PARSERS = {
    "nemotron-3-super-official": (
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "nemotron_v3", "qwen3_coder",
    ),
    "qwen3-5-35b-max-single-user": ("nvidia/Qwen3.5-35B-A3B-NVFP4", "qwen3", "qwen3_coder"),
    "70b-dense-max-concurrent": ("nvidia/Llama-3.3-70B-Instruct-FP4", "", "llama3_json"),
    "120b-moe-safest": (
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", "nemotron_v3", "qwen3_coder",
    ),
}  # fmt: skip
TOOLS_NOTE = (
    "Added the tool-call parser {tool} (with --enable-auto-tool-choice, which vLLM needs with "
    "it){reasoning}: without a tool-call parser vLLM answers a chat request carrying `tools` "
    "(what coding agents send) with HTTP 400."
)
REASONING_NOTE = (
    "Added the reasoning parser {reasoning}: vLLM returns the model's reasoning apart from "
    "its answer."
)


def add_parsers(apps, schema_editor):
    Recipe = apps.get_model("recipes", "Recipe")
    for slug, (model_id, reasoning, tool) in PARSERS.items():
        recipe = Recipe.objects.filter(slug=slug, is_preset=True, model_id=model_id).first()
        if recipe is None:  # gone, or an operator made it serve another model
            continue
        add_tool = bool(tool and not recipe.tool_call_parser)
        add_reasoning = bool(reasoning and not recipe.reasoning_parser)
        if add_tool:
            recipe.tool_call_parser = tool
            also = f" and the reasoning parser {reasoning}" if add_reasoning else ""
            note = TOOLS_NOTE.format(tool=tool, reasoning=also)
        elif add_reasoning:
            note = REASONING_NOTE.format(reasoning=reasoning)
        else:
            continue
        if add_reasoning:
            recipe.reasoning_parser = reasoning
        recipe.upgrade_notes = [*(recipe.upgrade_notes or []), note]
        recipe.save(update_fields=["tool_call_parser", "reasoning_parser", "upgrade_notes"])


class Migration(migrations.Migration):
    dependencies = [
        ("recipes", "0012_model_facts"),
    ]

    operations = [migrations.RunPython(add_parsers, migrations.RunPython.noop)]
