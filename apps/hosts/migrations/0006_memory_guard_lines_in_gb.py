"""The memory guard's lines move to GB (like the seed, the planner and admission) and to
new defaults: warn below 4.0 GB, act below 3.0 GB (sparkdomain/spark.py says why).

A host still at the old defaults (warn 8 GiB, act 3 GiB) gets the new ones; a host an
admin set by hand keeps its lines, converted exactly from GiB to GB."""

from django.core.validators import MinValueValidator
from django.db import migrations, models

GIB_IN_GB = 2**30 / 10**9
OLD_DEFAULTS_GIB = (8.0, 3.0)
NEW_DEFAULTS_GB = (4.0, 3.0)


def to_gb(apps, schema_editor):
    Host = apps.get_model("hosts", "Host")
    for host in Host.objects.all():
        lines = (host.watchdog_warn_gb, host.watchdog_act_gb)  # still GiB values here
        if lines == OLD_DEFAULTS_GIB:
            warn, act = NEW_DEFAULTS_GB
        else:
            warn, act = (round(v * GIB_IN_GB, 3) for v in lines)
        Host.objects.filter(pk=host.pk).update(watchdog_warn_gb=warn, watchdog_act_gb=act)


def to_gib(apps, schema_editor):
    Host = apps.get_model("hosts", "Host")
    for host in Host.objects.all():
        lines = (host.watchdog_warn_gb, host.watchdog_act_gb)
        if lines == NEW_DEFAULTS_GB:
            warn, act = OLD_DEFAULTS_GIB
        else:
            warn, act = (round(v / GIB_IN_GB, 3) for v in lines)
        Host.objects.filter(pk=host.pk).update(watchdog_warn_gb=warn, watchdog_act_gb=act)


class Migration(migrations.Migration):
    dependencies = [("hosts", "0005_vllm_contract")]

    operations = [
        migrations.RenameField("host", "watchdog_warn_gib", "watchdog_warn_gb"),
        migrations.RenameField("host", "watchdog_act_gib", "watchdog_act_gb"),
        migrations.RunPython(to_gb, to_gib),
        migrations.AlterField(
            model_name="host",
            name="watchdog_warn_gb",
            field=models.FloatField(
                default=4.0,
                help_text="A warning, a banner and an incident below this much MemAvailable. "
                "Default 4 GB: a stock Spark at 0.90 keeps 4.4 GB free by design.",
                validators=[MinValueValidator(0.1)],
                verbose_name="warn below (GB available)",
            ),
        ),
        migrations.AlterField(
            model_name="host",
            name="watchdog_act_gb",
            field=models.FloatField(
                default=3.0,
                help_text="The run is stopped below this much MemAvailable. Default 3 GB, the "
                "top of the seed's 2–3 GB freeze band.",
                validators=[MinValueValidator(0.1)],
                verbose_name="stop the run below (GB available)",
            ),
        ),
    ]
