"""Recipes that real vLLM accepts: drop --swap-space (removed in vLLM 0.18), turn the
seeds' --quantization nvfp4 (not a vLLM method) into "detected from the checkpoint", and
record on each recipe what was changed and why."""

from django.db import migrations, models

import apps.recipes.models

SWAP_NOTE = (
    "Removed --swap-space {value}: vLLM 0.18 removed the option (real vLLM refuses it with "
    "'unrecognized arguments'); there is no CPU swap any more, which is what --swap-space 0 "
    "asked for on a Spark."
)
NVFP4_NOTE = (
    "Quantization 'nvfp4' → detected from the checkpoint: nvfp4 is not a vLLM quantization "
    "method; vLLM reads an NVFP4 checkpoint's hf_quant_config.json by itself (modelopt_fp4)."
)


def fix_recipes(apps, schema_editor):
    Recipe = apps.get_model("recipes", "Recipe")
    for recipe in Recipe.objects.all():
        notes = list(recipe.upgrade_notes or [])
        value = format(recipe.swap_space.normalize(), "f") if recipe.swap_space is not None else "0"
        notes.append(SWAP_NOTE.format(value=value))
        if recipe.quantization == "nvfp4":
            recipe.quantization = ""
            notes.append(NVFP4_NOTE)
        recipe.upgrade_notes = notes
        recipe.save(update_fields=["quantization", "upgrade_notes"])


class Migration(migrations.Migration):
    dependencies = [
        ("recipes", "0002_presets"),
    ]

    operations = [
        migrations.AddField(
            model_name="recipe",
            name="upgrade_notes",
            field=models.JSONField(
                blank=True,
                default=list,
                editable=False,
                help_text="What upgrades of SparkPanel changed in this recipe, and why.",
            ),
        ),
        migrations.RunPython(fix_recipes, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name="recipe",
            name="swap_space",
        ),
        migrations.AlterField(
            model_name="recipe",
            name="quantization",
            field=models.CharField(
                blank=True,
                help_text="Blank: detected from the checkpoint (NVFP4, FP8, AWQ… checkpoints say "
                "what they are). Otherwise a method name of the image's vLLM (e.g. modelopt_fp4).",
                max_length=32,
                validators=[apps.recipes.models.validate_parser],
            ),
        ),
    ]
