import pytest

from apps.benchmarks.models import Suite
from apps.benchmarks.reference import DEFAULT_SCENARIOS


@pytest.fixture
def quick_suite(db):
    return Suite.objects.create(
        name="test quick", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 128}],
        repetitions=2, warmup_requests=1, sweep_prompt_tokens=200, sweep_output_tokens=512,
        sweep_levels=[1, 2, 4], requests_per_level=4, slo_ttft_s=2.0, slo_tpot_s=0.1,
    )  # fmt: skip


@pytest.fixture
def default_suite(db):
    return Suite.objects.create(
        name="test default", scenarios=DEFAULT_SCENARIOS, repetitions=1, warmup_requests=1,
        sweep_prompt_tokens=1834, sweep_output_tokens=108, sweep_levels=[], requests_per_level=4,
        is_default=True,
    )  # fmt: skip


@pytest.fixture
def qwen_team(qwen):
    """The Qwen recipe serving up to 8 at once (the preset is tuned for one user)."""
    qwen.pk = None
    qwen.slug, qwen.name, qwen.max_num_seqs = "qwen-team", "Qwen team", 8
    qwen.save()
    return qwen
