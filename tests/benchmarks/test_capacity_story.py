"""One capacity story on the recipe and run pages (issue 43): memory planned and measured,
latency measured with its SLO, which one binds — and a headline from a level whose load
generator lagged says so."""

import re

from django.utils import timezone

from apps.benchmarks import selectors
from apps.runs.models import PlanCheck, Run, RunState
from tests.benchmarks.test_readouts import _job, _recipe, _sweep

LAG = {"client_lagged": True}


def test_a_headline_from_a_client_limited_level_says_so(db, default_suite, sim_host, member):
    recipe = _recipe("nemotron-3-super-official")
    slo = {"ttft_s": 2.0, "tpot_s": 0.1}
    job = _job(default_suite, recipe, sim_host, member, slo=slo)
    _sweep(job, 108, 1, decode=20.0)
    _sweep(job, 108, 2, decode=12.0, diagnostics=LAG)  # meets the SLO, but the client lagged
    _sweep(job, 108, 4, decode=6.0)
    answer = selectors.capacity_answer(job)
    assert answer["users"] == 2 and answer["client_limited"] == "client lag"
    assert "The level at 2 is flagged “client lag”" in answer["text"]
    # The first level above the answer missed while its client lagged: the same caveat.
    missed = _job(default_suite, recipe, sim_host, member, slo=slo)
    _sweep(missed, 108, 1, decode=20.0)
    _sweep(missed, 108, 2, decode=6.0, diagnostics=LAG)
    assert selectors.capacity_answer(missed)["client_limited"] == "client lag"
    # A client that kept up: no caveat (the lag at a level that decided nothing is ignored).
    clean = _job(default_suite, recipe, sim_host, member, slo=slo)
    _sweep(clean, 108, 1, decode=20.0)
    _sweep(clean, 108, 2, decode=12.0)
    _sweep(clean, 108, 4, decode=6.0)
    _sweep(clean, 108, 8, decode=3.0, diagnostics=LAG)
    answer = selectors.capacity_answer(clean)
    assert answer["client_limited"] == "" and "flagged" not in answer["text"]


def _ready_run(recipe, host, max_concurrency: float) -> Run:
    run = Run.objects.create(recipe=recipe, host=host, port=host.port_min, image="x",
                             state=RunState.READY,
                             facts={"max_concurrency": max_concurrency})  # fmt: skip
    PlanCheck.objects.create(
        run=run, host=host, recipe=recipe, image="x", predicted=49, measured=max_concurrency,
        ratio=max_concurrency / 49, quantity=PlanCheck.Quantity.MAX_CONCURRENCY,
    )  # fmt: skip
    return run


def _story(html: str) -> tuple[str, str]:
    binding = re.search(r'id="capacity-story" data-binding="(\w+)"', html).group(1)
    headline = re.search(r'class="capacity-headline"><strong>(.*?)</strong>', html).group(1)
    return binding, headline


def test_the_recipe_and_run_pages_tell_one_story(db, client_as, default_suite, sim_host, member):
    recipe = _recipe("nemotron-3-super-official")  # max_num_seqs 4
    recipe.max_num_seqs = 16
    recipe.save()
    page = recipe.get_absolute_url()
    # Nothing measured: the plan's estimate.
    binding, headline = _story(client_as(member).get(page).content.decode())
    assert headline.startswith("The latency SLO, not memory, will be the limit: 14 users")
    assert binding == "latency"
    # vLLM measured the KV capacity at a ready start; a benchmark measured 2 users.
    run = _ready_run(recipe, sim_host, 61.5)
    job = _job(default_suite, recipe, sim_host, member, slo={"ttft_s": 2.0, "tpot_s": 0.1})
    job.finished_at = timezone.now()
    job.save()
    _sweep(job, 108, 1, decode=20.0)
    _sweep(job, 108, 2, decode=11.0)
    _sweep(job, 108, 4, decode=7.0)
    html = client_as(member).get(page).content.decode()
    binding, headline = _story(html)
    assert binding == "latency"
    assert headline.startswith(
        "The latency SLO, not memory, is the limit: 2 users with TTFT p95 ≤ 2 s and ≥ 10 tok/s "
        "each, measured. Memory holds 61 at full context; --max-num-seqs admits 16."
    )
    assert f"as vLLM measured at a ready start, run {run.pk} on {sim_host.name}" in html
    assert f"job {job.pk} on {sim_host.name}" in html
    # The run page tells the same story with its own start.
    run_html = client_as(member).get(run.get_absolute_url()).content.decode()
    assert _story(run_html) == (binding, headline)
    assert "as vLLM measured at a ready start, this run" in run_html
    # A later benchmark whose generations were too short to time measured no latency: the
    # answer above stands (it is not "0 users").
    short = _job(default_suite, recipe, sim_host, member, sweep={"output_tokens": 8},
                 slo={"ttft_s": 2.0, "tpot_s": 0.1})  # fmt: skip
    short.finished_at = timezone.now()
    short.save()
    _sweep(short, 8, 1, decode=20.0)
    assert _story(client_as(member).get(page).content.decode()) == (binding, headline)
    # Edited after both: the old start no longer describes it; the benchmark is kept, flagged.
    recipe.max_num_seqs = 1
    recipe.save()  # updated_at moves on
    html = client_as(member).get(page).content.decode()
    binding, headline = _story(html)
    assert binding == "scheduler" and headline.startswith("--max-num-seqs is the limit: 1 user")
    assert "as planned" in html and "The recipe changed after that benchmark" in html
