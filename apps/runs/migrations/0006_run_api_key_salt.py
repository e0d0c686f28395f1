"""Each run's own vLLM API key (issue 20): a random salt per run, from which the panel
derives the key. Runs that exist already keep a blank salt: their servers were started
without a key."""

from django.db import migrations, models

import apps.runs.models


class Migration(migrations.Migration):
    dependencies = [("runs", "0005_downloading_prefetch")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="api_key_salt",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AlterField(
            model_name="run",
            name="api_key_salt",
            field=models.CharField(
                blank=True, default=apps.runs.models.new_api_key_salt, max_length=64
            ),
        ),
    ]
