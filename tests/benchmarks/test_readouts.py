"""What the benchmark results say, and that every word they use explains itself (issue 16,
point 5): a rate needs enough tokens to be a rate, a missing reference says so, the seed's
inconsistent figure carries its note, Compare shows each job's suite, one stream's lag is a
busy machine, not the client's own load."""

import csv
import io
import json
import re

import pytest
from django.template import Context, Template
from django.urls import reverse
from django.utils.html import escape

from apps.benchmarks import harness, selectors, terms
from apps.benchmarks.harness.client import Client
from apps.benchmarks.harness.levels import run_level
from apps.benchmarks.harness.stats import client_flag, decode_too_short
from apps.benchmarks.harness.types import LevelSpec, Scenario
from apps.benchmarks.models import J, Job, Result
from apps.benchmarks.reference import SEED_MODEL, SEED_TABLE
from apps.benchmarks.selectors import suite_plan
from apps.recipes.models import Recipe
from sparkcli.compare import compare_table, decode_check
from sparkdomain.presets import RECIPES
from tests.conftest import run_async
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch

# --- the one threshold ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "decode_s", "scale", "too_short"),
    [
        (2, 5.0, 1, True),  # a 2-token call: one gap, whatever it took
        (15, 5.0, 1, True),
        (16, 5.0, 1, False),
        (16, 0.020, 1, False),  # exactly 20 ms of wall clock is enough
        (16, 0.0199, 1, True),
        (32, 0.5, 50, True),  # 0.5 simulated s at 50× is 10 ms of wall clock
        (32, 1.0, 50, False),  # 20 ms of wall clock
        (32, None, 1, False),  # enough tokens, unknown duration: nothing says it is short
        (None, 1.0, 1, True),
    ],
)
def test_decode_too_short_boundaries(tokens, decode_s, scale, too_short):
    assert decode_too_short(tokens, decode_s, scale) is too_short


def test_one_stream_lag_is_a_busy_machine_not_a_lagging_client():
    late = [0.02] * 50  # the event loop woke 20 ms late every time
    one = harness._diagnostics(late, [], 1)
    many = harness._diagnostics(late, [], 8)
    assert (one["client_flag"], one["client_lagged"]) == ("busy machine", True)
    assert (many["client_flag"], many["client_lagged"]) == ("client lag", True)
    assert harness._diagnostics([0.0001] * 50, [], 8)["client_flag"] == "ok"
    # Results stored before the split said "client_saturated" at one stream too.
    assert client_flag({"client_saturated": True}, 1) == "busy machine"
    assert client_flag({"client_saturated": True}, 2) == "client lag"


def test_a_real_two_token_level_is_too_short_to_time_and_32_tokens_are_timed(tmp_path):
    sim = launch(tmp_path, *NEMOTRON_FLAGS, time_scale=10)
    try:

        async def go(output: int):
            async with await Client.create(sim.url) as client:
                spec = LevelSpec(Scenario(f"58/{output}", 58, output), 1, 2, 1)
                return await run_level(client, spec, time_scale=10)

        short, long = run_async(go(2)), run_async(go(32))
    finally:
        sim.stop()
    assert short.ok == 2 and long.ok == 2
    assert short.decode_timed is False and short.to_dict()["decode_timed"] is False
    assert long.decode_timed is True and long.to_dict()["decode_timed"] is True


# --- stored results on the pages ----------------------------------------------------------------


def _recipe(slug: str) -> Recipe:
    data = next(r for r in RECIPES if r["slug"] == slug)
    recipe, _ = Recipe.objects.update_or_create(slug=slug, defaults=data)
    return recipe


def _job(suite, recipe, host, user, **plan_changes) -> Job:
    plan = suite_plan(suite)
    for key, value in plan_changes.items():
        if isinstance(value, dict):
            plan[key] = {**plan[key], **value}
        else:
            plan[key] = value
    return Job.objects.create(suite=suite, recipe=recipe, host=host, queued_by=user,
                              state=J.DONE, plan=plan)  # fmt: skip


def _scenario(job, prompt, output, decode, ttft=0.4, e2e=None, **metrics) -> Result:
    e2e = e2e if e2e is not None else ttft + (output - 1) / decode
    return Result.objects.create(
        job=job, kind="scenario", scenario=f"{prompt}/{output}", prompt_tokens=prompt,
        output_tokens=output, concurrency=1, ok=3, ttft_p50_s=ttft, ttft_p95_s=ttft,
        e2e_p50_s=e2e, decode_tps_p50=decode, prefill_tps_p50=prompt / ttft,
        metrics={"time_scale": 1.0, **metrics},
    )  # fmt: skip


def _sweep(job, output, concurrency, decode, ttft_p95=0.5, diagnostics=None) -> Result:
    return Result.objects.create(
        job=job, kind="sweep", scenario="sweep", prompt_tokens=1834, output_tokens=output,
        concurrency=concurrency, ok=4, ttft_p50_s=ttft_p95 / 2, ttft_p95_s=ttft_p95,
        ttft_p99_s=ttft_p95, e2e_p50_s=1.0, decode_tps_p50=decode, output_tps=decode * concurrency,
        request_rps=1.0, goodput_rps=1.0, metrics={"time_scale": 1.0,
                                                   "diagnostics": diagnostics or {}},
    )  # fmt: skip


@pytest.fixture
def qwen_job(db, default_suite, sim_host, member):
    """The default suite (the seed's scenarios) on Qwen: a 2-token call that would read
    "127 % ⚠ implausible", a timed 108-token one, and a one-stream sweep level whose
    client lagged."""
    job = _job(default_suite, _recipe("qwen3-5-35b-max-single-user"), sim_host, member)
    ceiling = selectors.decode_ceiling(job)
    assert ceiling
    _scenario(job, 58, 2, decode=ceiling * 1.27)
    _scenario(job, 1834, 108, decode=ceiling * 0.8)
    _sweep(job, 108, 1, ceiling * 0.8, diagnostics={"client_saturated": True})
    _sweep(job, 108, 4, ceiling * 0.5, diagnostics={"client_lagged": True})
    return job


def test_a_two_token_rate_reads_too_short_to_time_with_no_roofline_chart_point_or_export(
    client_as, member, qwen_job
):
    rows = selectors.scenario_rows(qwen_job)
    short, timed = rows
    assert not short.decode_timed and short.roofline_percent is None and short.plausible
    assert timed.decode_timed and 0 < timed.roofline_percent < 100
    # No measured point in the chart (null), the timed one is there.
    decode = selectors.scenario_chart(qwen_job)["metrics"]["decode_tps"]["series"][0]
    assert decode["values"][0] is None and decode["values"][1] == timed.result.decode_tps_p50
    assert decode["notes"] == ["too short to time", None]  # the chart's hover says why

    html = client_as(member).get(qwen_job.get_absolute_url()).content.decode()
    table = html[html.index("<h2>Single stream") : html.index("<h2>Concurrency sweep")]
    body = table[table.index("<tbody>") :]
    first_row = body[: body.index("</tr>")]
    assert ">too short to time</abbr>" in first_row
    assert "implausible" not in first_row and " %" not in first_row

    data = json.loads(client_as(member).get(reverse("benchmark-json", args=[qwen_job.pk])).content)
    by_shape = {(r["input_len"], r["output_len"], r["kind"]): r for r in data["results"]}
    assert by_shape[(58, 2, "scenario")]["decode_timed"] is False
    assert by_shape[(1834, 108, "scenario")]["decode_timed"] is True
    rows_csv = list(csv.DictReader(io.StringIO(
        client_as(member).get(reverse("benchmark-csv", args=[qwen_job.pk])).content.decode())))  # fmt: skip
    assert {r["output_len"]: r["decode_timed"] for r in rows_csv if r["kind"] == "scenario"} == {
        "2": "False", "108": "True"}  # fmt: skip


def test_an_untimed_sweep_earns_no_capacity_credit_and_no_curve_point(
    default_suite, sim_host, member
):
    recipe = _recipe("qwen3-5-35b-max-single-user")
    job = _job(default_suite, recipe, sim_host, member, sweep={"output_tokens": 8},
               slo={"ttft_s": 2.0, "tpot_s": 0.5})  # fmt: skip
    for c in (1, 2, 4):
        _sweep(job, 8, c, decode=40.0)  # would meet the 2 tok/s SLO at every level
    answer = selectors.capacity_answer(job)
    assert answer["users"] == 0 and answer["untimed_levels"] == 3
    assert "too short to time" in answer["text"]
    assert selectors.curve_series(job)["points"] == []
    # The same levels with enough tokens do earn it: the check is the token count.
    timed = _job(default_suite, recipe, sim_host, member, slo={"ttft_s": 2.0, "tpot_s": 0.5})
    for c in (1, 2, 4):
        _sweep(timed, 108, c, decode=40.0)
    assert selectors.capacity_answer(timed)["users"] == 4
    assert len(selectors.curve_series(timed)["points"]) == 3


def test_the_cli_decode_check_skips_levels_too_short_to_time():
    keys = ("kind", "input_len", "output_len", "max_concurrency", "median_decode_tok_s",
            "decode_timed")  # fmt: skip

    def job(pk, *rows):
        return {"job": pk, "results": [dict(zip(keys, r, strict=True)) for r in rows]}

    base = job(1, ("scenario", 58, 2, 1, 90.0, False), ("scenario", 1834, 108, 1, 30.0, True))
    noisy = job(2, ("scenario", 58, 2, 1, 20.0, False), ("scenario", 1834, 108, 1, 29.5, True))
    check = decode_check([base, noisy], 5)
    assert check.ok and check.compared == 1  # the 2-token "−78 %" is not a drop
    only_short = job(3, ("scenario", 58, 2, 1, 20.0, False))
    assert decode_check([base, only_short], 5).nothing_shared == [3]
    assert "too short" in compare_table([base, noisy])


def test_a_model_without_a_published_reference_says_so(client_as, member, qwen_job):
    html = client_as(member).get(qwen_job.get_absolute_url()).content.decode()
    assert ">No published reference for this model</abbr>: the published figures" in html
    assert qwen_job.recipe.model_id in html and 'data-term="seed"' not in html
    assert html.count(">no published reference for this model</abbr>") == 2  # both rows
    # A suite whose scenarios the seed never measured says nothing about a reference.
    other = _job(qwen_job.suite, qwen_job.recipe, qwen_job.host, member)
    _scenario(other, 200, 64, decode=30.0)
    assert selectors.reference_note(other, selectors.scenario_rows(other)) == ""


def test_the_inconsistent_seed_figure_carries_its_note(client_as, member, default_suite, sim_host):
    nemotron = _recipe("nemotron-3-super-official")
    assert nemotron.model_id == SEED_MODEL
    job = _job(default_suite, nemotron, sim_host, member)
    for prompt, output in SEED_TABLE:
        _scenario(job, prompt, output, decode=23.0, ttft=1.1)
    rows = {(r.result.prompt_tokens, r.result.output_tokens): r
            for r in selectors.scenario_rows(job)}  # fmt: skip
    note = rows[(1834, 32)].seed_notes["e2e_s"]
    # Precisely what is wrong: total = TTFT leaves nothing for 31 tokens at 23.7 tok/s.
    assert "1.12 s" in note and "31" in note and "23.7" in note and "2.4 s" in note
    assert not rows[(7234, 124)].seed_notes and not rows[(1834, 108)].seed_notes
    html = client_as(member).get(job.get_absolute_url()).content.decode()
    assert "No published reference" not in html
    e2e_cell = re.search(r"seed</abbr> 1\.12 s <abbr[^>]*>⚠ inconsistent</abbr>", html)
    assert e2e_cell and 'title="Inconsistent in the seed' in e2e_cell.group(0)
    assert "Seed 1834/32 total 1.12: Inconsistent in the seed" in html  # the table's foot


def test_compare_shows_each_suite_and_warns_when_they_differ(
    client_as, member, qwen_job, quick_suite
):
    same = _job(qwen_job.suite, qwen_job.recipe, qwen_job.host, member)
    other = _job(quick_suite, qwen_job.recipe, qwen_job.host, member)
    edited = _job(qwen_job.suite, qwen_job.recipe, qwen_job.host, member,
                  slo={"ttft_s": 9.0, "tpot_s": 0.5})  # fmt: skip
    url = reverse("benchmark-compare")
    client = client_as(member)

    def page(*jobs):
        return client.get(url, {"jobs": ",".join(str(j.pk) for j in jobs)}).content.decode()

    html = page(qwen_job, same)
    assert html.count(f'<td class="compare-suite">{qwen_job.plan["name"]}</td>') == 2
    assert "suite-warning" not in html
    html = page(qwen_job, other)
    assert "suite-warning" in html and "used different suites" in html
    assert f"job {other.pk}: {quick_suite.name}" in html
    assert "different versions of the suite" in page(qwen_job, edited)


def test_one_stream_lag_reads_busy_machine_on_the_page(client_as, member, qwen_job):
    html = client_as(member).get(qwen_job.get_absolute_url()).content.decode()
    sweep = html[html.index("<h2>Concurrency sweep") :]
    rows = sweep[sweep.index("<tbody>") : sweep.index("</tbody>")].split("</tr>")
    assert ">busy machine</abbr>" in rows[0] and "client lag" not in rows[0]
    assert ">client lag</abbr>" in rows[1] and "saturated" not in rows[1]


# --- every word explains itself ---------------------------------------------------------------


def test_the_term_tag_renders_the_word_with_its_definition():
    html = Template('{% load bench_terms %}{% term "saturated" %} {% term "implausible" '
                    '"⚠ implausible" cls="bad-text" %}').render(Context())  # fmt: skip
    saturated = terms.get("saturated")
    assert (f'<abbr class="term" title="{escape(saturated.definition)}" tabindex="0" '
            f'data-term="saturated" aria-describedby="{saturated.slug}">saturated</abbr>'
            ) in html  # fmt: skip
    assert 'class="term bad-text"' in html and ">⚠ implausible</abbr>" in html
    with pytest.raises(KeyError, match="no definition"):
        Template('{% load bench_terms %}{% term "fast" %}').render(Context())


def test_every_term_on_a_results_page_has_a_definition_there(client_as, member, qwen_job):
    job_html = client_as(member).get(qwen_job.get_absolute_url()).content.decode()
    other = _job(qwen_job.suite, qwen_job.recipe, qwen_job.host, member)
    compare_html = (
        client_as(member)
        .get(reverse("benchmark-compare"), {"jobs": f"{qwen_job.pk},{other.pk}"})
        .content.decode()
    )
    for html in (job_html, compare_html):
        used = re.findall(r'<abbr class="term[^"]*" title="([^"]*)"[^>]*aria-describedby="([^"]+)"',
                          html)  # fmt: skip
        assert len(used) > 5
        for title, slug in used:
            assert title.strip()
            # ...and the same words in the page's definitions list.
            assert f'<dd id="{slug}">' in html
    # The words the issue named, with their definitions, in the list.
    for word in ("implausible", "client lag", "busy machine", "too short to time", "roofline %",
                 "TTFT", "TPOT", "capacity", "SLO"):  # fmt: skip
        entry = terms.get(word)
        assert f"<dt>{entry.word}</dt>" in job_html
    # Every diagnostic the sweep can raise has a term: no bare flag words.
    flags = {harness.CLIENT_LAG, harness.CLIENT_BUSY}
    assert all(terms.get(f) for f in flags)


def test_compare_reads_junk_job_ids_as_no_job(client_as, member, qwen_job, quick_suite):
    other = _job(quick_suite, qwen_job.recipe, qwen_job.host, member)
    client = client_as(member)
    url = reverse("benchmark-compare")
    junk = ["9" * 30, "²", "-1", "0", "abc", ""]  # overflow, not ASCII, not positive
    response = client.get(url, {"jobs": ",".join([*junk, str(qwen_job.pk), str(other.pk)])})
    assert response.status_code == 200
    assert f"job {other.pk}" in response.content.decode()
    response = client.get(url, {"jobs": ",".join([*junk, str(qwen_job.pk)])})
    assert response.status_code == 302  # one job: "Choose at least two jobs to compare."
