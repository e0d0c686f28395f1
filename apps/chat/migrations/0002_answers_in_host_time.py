"""One clock (apps/hosts/clock.py): answers saved before it, on a simulated host, were timed
on the wall clock; convert them to the host's time (TTFT × scale, tok/s ÷ scale) so every
saved answer reads like the new ones and like the benchmarks. The scale is the one the
run recorded, else its host's speed now (what the run most likely started with)."""

from django.db import migrations

SCALE_FACT = "sim_time_scale"


def _scale(run) -> float | None:
    if run is None:
        return None
    facts = run.facts or {}
    if SCALE_FACT in facts:
        return float(facts[SCALE_FACT]) if facts[SCALE_FACT] else None
    host = run.host
    return float(host.sim_time_scale) if host.simulated and host.sim_time_scale else None


def to_host_time(apps, schema_editor):
    Message = apps.get_model("chat", "Message")
    answers = Message.objects.filter(run__host__simulated=True).select_related("run__host")
    for message in answers.iterator():
        scale = _scale(message.run)
        if not scale or scale == 1:
            continue
        fields = {}
        if message.ttft_s is not None:
            fields["ttft_s"] = message.ttft_s * scale
        if message.tok_s is not None:
            fields["tok_s"] = message.tok_s / scale
        if fields:
            Message.objects.filter(pk=message.pk).update(**fields)


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0001_initial"),
        ("runs", "0001_initial"),
        ("hosts", "0001_initial"),
    ]

    operations = [migrations.RunPython(to_host_time, migrations.RunPython.noop)]
