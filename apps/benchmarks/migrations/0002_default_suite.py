from django.db import migrations

from apps.benchmarks.reference import DEFAULT_SCENARIOS


def create_default(apps, schema_editor):
    Suite = apps.get_model("benchmarks", "Suite")
    Suite.objects.update_or_create(
        name="Default: seed table + concurrency sweep",
        defaults={
            "description": "The five single-stream scenarios of the official vLLM-on-Spark "
            "evaluation, then a concurrency sweep (1, 2, 4, … up to twice max-num-seqs) at "
            "1,834/108 prompt/generated tokens. Cold prefix cache.",
            "scenarios": DEFAULT_SCENARIOS,
            "repetitions": 3,
            "warmup_requests": 1,
            "sweep_enabled": True,
            "sweep_prompt_tokens": 1834,
            "sweep_output_tokens": 108,
            "sweep_levels": [],
            "requests_per_level": 8,
            "slo_ttft_s": 2.0,
            "slo_tpot_s": 0.1,
            "warm_prefix": False,
            "is_default": True,
        },
    )
    Suite.objects.update_or_create(
        name="Quick check",
        defaults={
            "description": "One short single-stream request shape and a small sweep: a smoke "
            "test after an image update.",
            "scenarios": [{"name": "medium prompt, short gen", "prompt_tokens": 1834,
                           "output_tokens": 32}],
            "repetitions": 2,
            "warmup_requests": 1,
            "sweep_enabled": True,
            "sweep_prompt_tokens": 1834,
            "sweep_output_tokens": 32,
            "sweep_levels": [1, 2, 4],
            "requests_per_level": 4,
            "slo_ttft_s": 2.0,
            "slo_tpot_s": 0.1,
        },
    )


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0001_initial")]
    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
