"""Admission with vLLM's own verdict (issue 40): once the panel knows the model (its stored
config.json), a start is refused only where vLLM would refuse it — in vLLM's words — and
what the older planner called "does not fit" but vLLM would start is admitted."""

from __future__ import annotations

import pytest

from apps.recipes.models import ModelFacts
from apps.runs.models import Run
from apps.runs.services import RunRefused, run_start
from sparkdomain.planner import Verdict
from tests.model_configs import QWEN3_SMALL
from tests.recipes.factories import make_recipe

pytestmark = pytest.mark.django_db
GIB = 1 << 30


def _known(model_id: str) -> None:
    ModelFacts.objects.create(repo_id=model_id, commit="b" * 40, config=QWEN3_SMALL,
                              checkpoint_bytes=int(1.12 * GIB), source="hub")  # fmt: skip


def test_what_vllm_would_start_is_admitted_though_the_old_planner_said_no(sim_host, operator):
    # 256 sequences of 40,960 tokens at 0.30: the older planner wants all of them to fit;
    # vLLM starts it and serves fewer at once.
    recipe = make_recipe(name="Many", model_id="Qwen/Qwen3-0.6B", max_model_len=40960,
                         max_num_seqs=256, gpu_memory_utilization="0.30")  # fmt: skip
    assert recipe.plan(sim_host.spec()).verdict is Verdict.DOES_NOT_FIT  # the older rule
    with pytest.raises(RunRefused):
        run_start(recipe=recipe, host=sim_host, user=operator)  # the model is not known yet
    _known(recipe.model_id)
    run = run_start(recipe=recipe, host=sim_host, user=operator)
    assert run.fit_verdict == str(Verdict.FITS)


def test_what_vllm_would_refuse_is_refused_in_its_words_and_an_operator_may_override(
    sim_host, operator
):
    recipe = make_recipe(name="Too long", model_id="Qwen/Qwen3-0.6B", max_model_len=4_000_000,
                         max_num_seqs=1, gpu_memory_utilization="0.10")  # fmt: skip
    _known(recipe.model_id)
    with pytest.raises(RunRefused) as refused:
        run_start(recipe=recipe, host=sim_host, user=operator)
    assert refused.value.code == "does_not_fit"
    assert "To serve at least one request with the model's max seq len (4000000)" in str(
        refused.value
    )
    assert not Run.objects.exists()
    run = run_start(recipe=recipe, host=sim_host, user=operator, fit_confirmation="Too long")
    assert run.fit_override_at is not None
