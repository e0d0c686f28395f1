from django.db import migrations


def create_presets(apps, schema_editor):
    from sparkdomain.presets import RECIPES

    Recipe = apps.get_model("recipes", "Recipe")
    for data in RECIPES:
        values = {k: v for k, v in data.items() if k != "slug"}
        Recipe.objects.update_or_create(slug=data["slug"], defaults={**values, "is_preset": True})


def remove_presets(apps, schema_editor):
    Recipe = apps.get_model("recipes", "Recipe")
    Recipe.objects.filter(is_preset=True).delete()


class Migration(migrations.Migration):
    dependencies = [("recipes", "0001_initial")]
    operations = [migrations.RunPython(create_presets, remove_presets)]
