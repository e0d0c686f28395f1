"""Suites are edited in the panel by operators; bad input keeps what was typed."""

import pytest
from django.urls import reverse

from apps.benchmarks.harness.arrivals import Arrivals
from apps.benchmarks.harness.types import Lengths, SharedPrefix
from apps.benchmarks.models import Suite
from apps.benchmarks.plans import plan_levels, plan_refusal, sweep_shape

pytestmark = pytest.mark.django_db

FORM = {
    "name": "Long context", "description": "", "repetitions": 2, "warmup_requests": 1,
    "sweep_enabled": "on", "sweep_prompt_tokens": 7234, "sweep_output_tokens": 124,
    "requests_per_level": 8, "slo_ttft_s": 5, "slo_tpot_s": 0.1,
    "scenarios_text": "long prompt, short gen: 7234/32\n\n: 1834/108\n",
    "levels_text": "1, 2, 4, 8", "sweep_mode": "concurrency", "arrival_kind": "poisson",
    "burstiness": 1, "ramp_up_s": 0, "arrival_seed": 0, "endpoint": "chat",
    "shared_prefix_groups": 0, "shared_prefix_tokens": 1000, "length_kind": "fixed",
    "length_spread": 0.25, "sweep_dataset": "synthetic", "session_turns": 1,
    "think_time_s": 10, "followup_tokens": 64,
}  # fmt: skip
RATES = {**FORM, "sweep_mode": "rate", "rates_text": "0.5, 1, 2.5", "arrival_kind": "gamma",
         "burstiness": 0.5, "rate_max_concurrency": 8, "ramp_up_s": 2, "arrival_seed": 9}  # fmt: skip


def test_an_operator_creates_and_edits_a_suite(client_as, operator):
    client = client_as(operator)
    response = client.post(reverse("benchmark-suite-new"), FORM)
    assert response.status_code == 302
    suite = Suite.objects.get(name="Long context")
    assert suite.scenarios == [
        {"name": "long prompt, short gen", "prompt_tokens": 7234, "output_tokens": 32},
        {"name": "1834/108", "prompt_tokens": 1834, "output_tokens": 108},
    ]
    assert suite.sweep_levels == [1, 2, 4, 8]
    html = client.get(reverse("benchmark-suite-edit", args=[suite.pk])).content.decode()
    assert "long prompt, short gen: 7234/32" in html and 'value="1, 2, 4, 8"' in html
    client.post(reverse("benchmark-suite-edit", args=[suite.pk]), {**FORM, "levels_text": ""})
    assert Suite.objects.get(pk=suite.pk).sweep_levels == []
    suite.refresh_from_db()
    assert suite.levels_for(4) == [1, 2, 4, 8] and suite.levels_for(3) == [1, 2, 4, 6]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("scenarios_text", "judge call 58/2", "write it as name: prompt/generated"),
        ("scenarios_text", "", "This field is required"),
        ("levels_text", "1, 4, 2", "increasing"),
        ("levels_text", "1, two", "Whole numbers"),
    ],
)
def test_bad_suite_input_is_refused_and_kept(client_as, operator, field, value, message):
    response = client_as(operator).post(reverse("benchmark-suite-new"), {**FORM, field: value})
    html = response.content.decode()
    assert response.status_code == 400 and message in html
    assert "Long context" in html  # what was typed is still there
    assert not Suite.objects.filter(name="Long context").exists()


def test_an_operator_builds_a_request_rate_sweep(client_as, operator):
    client = client_as(operator)
    assert client.post(reverse("benchmark-suite-new"), RATES).status_code == 302
    suite = Suite.objects.get(name="Long context")
    assert (suite.sweep_mode, suite.sweep_rates) == ("rate", [0.5, 1, 2.5])
    sweep = suite.plan()["sweep"]
    assert sweep["arrivals"] == {"kind": "gamma", "burstiness": 0.5, "max_concurrency": 8,
                                 "ramp_up_s": 2.0, "seed": 9}  # fmt: skip
    levels = plan_levels(suite.plan(), max_num_seqs=4)
    rates = [(kind, spec.arrivals.rate) for kind, spec in levels if kind != "scenario"]
    assert rates == [("rate", 0.5), ("rate", 1), ("rate", 2.5)]
    spec = levels[-1][1]
    assert spec.arrivals == Arrivals(rate=2.5, kind="gamma", burstiness=0.5, ramp_up_s=2,
                                     seed=9, max_concurrency=8)  # fmt: skip
    assert spec.requests == 8 and spec.concurrency == 4  # warm-up streams: min(cap, 4)
    html = client.get(reverse("benchmark-suite-edit", args=[suite.pk])).content.decode()
    assert 'value="0.5, 1, 2.5"' in html
    listing = client.get(reverse("benchmark-suites")).content.decode()
    assert "7234/124 at 0.5, 1, 2.5 req/s (Gamma" in listing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rates_text": "2, 1"}, "increasing"),
        ({"rates_text": "1, fast"}, "Requests per second separated by commas"),
        ({"rates_text": "1e9"}, "Requests per second separated by commas"),
        ({"rates_text": "999999"}, "at most 10000"),
        ({"rates_text": ""}, "A rate sweep needs at least one request rate"),
        ({"burstiness": 0}, "greater than or equal to 0.01"),
        ({"ramp_up_s": 99999}, "less than or equal to 3600"),
    ],
)
def test_bad_rate_sweeps_are_refused_and_kept(client_as, operator, change, message):
    response = client_as(operator).post(reverse("benchmark-suite-new"), {**RATES, **change})
    html = response.content.decode()
    assert response.status_code == 400 and message in html
    assert not Suite.objects.filter(name="Long context").exists()


def test_a_suite_with_shared_system_prompts_gives_every_level_the_prefix(client_as, operator):
    client = client_as(operator)
    form = {**FORM, "shared_prefix_groups": 3, "shared_prefix_tokens": 1500}
    assert client.post(reverse("benchmark-suite-new"), form).status_code == 302
    suite = Suite.objects.get(name="Long context")
    levels = plan_levels(suite.plan(), max_num_seqs=4)
    assert {spec.shared_prefix for _kind, spec in levels} == {SharedPrefix(3, 1500)}
    # a prefix longer than a scenario's prompt is refused, naming the scenario
    response = client.post(reverse("benchmark-suite-new"),
                           {**form, "name": "Too long", "shared_prefix_tokens": 5000})  # fmt: skip
    assert response.status_code == 400
    assert "a shared prefix of 5,000 tokens leaves no room in a 1,834-token prompt" in (
        response.content.decode()
    )
    response = client.post(reverse("benchmark-suite-new"),
                           {**form, "name": "Both", "warm_prefix": "on"})  # fmt: skip
    assert response.status_code == 400 and "exclude each other" in response.content.decode()


def test_a_suite_of_varied_lengths_gives_every_level_its_distribution(client_as, operator):
    client = client_as(operator)
    form = {**FORM, "length_kind": "normal", "length_spread": 0.2, "arrival_seed": 7}
    assert client.post(reverse("benchmark-suite-new"), form).status_code == 302
    levels = plan_levels(Suite.objects.get(name="Long context").plan(), max_num_seqs=4)
    assert {spec.lengths for _kind, spec in levels} == {Lengths("normal", 0.2, seed=7)}
    response = client.post(reverse("benchmark-suite-new"),
                           {**form, "name": "Too wide", "length_spread": 0.8})  # fmt: skip
    assert response.status_code == 400 and "at most 0.5" in response.content.decode()


def test_a_context_depth_sweep_asks_the_same_question_after_more_context(client_as, operator):
    client = client_as(operator)
    form = {**FORM, "depths_text": "0, 4096, 16384"}
    assert client.post(reverse("benchmark-suite-new"), form).status_code == 302
    suite = Suite.objects.get(name="Long context")
    assert suite.context_depths == [0, 4096, 16384]
    singles = [spec.scenario for kind, spec in plan_levels(suite.plan(), 4) if kind == "scenario"]
    depth = [(s.name, s.prompt_tokens, s.output_tokens) for s in singles if "depth" in s.name]
    assert depth == [("context depth 0", 64, 128), ("context depth 4,096", 4160, 128),
                     ("context depth 16,384", 16448, 128)]  # fmt: skip
    html = client.get(reverse("benchmark-suite-edit", args=[suite.pk])).content.decode()
    assert 'value="0, 4096, 16384"' in html
    for bad, message in (("4096, 0", "increasing"), ("4k", "Whole numbers of tokens")):
        response = client.post(reverse("benchmark-suite-new"),
                               {**form, "name": "Bad", "depths_text": bad})  # fmt: skip
        assert response.status_code == 400 and message in response.content.decode()


def test_a_sharegpt_rate_sweep_takes_its_requests_from_the_dataset(client_as, operator):
    from apps.benchmarks.harness.datasets import Dataset

    client = client_as(operator)
    form = {**RATES, "sweep_dataset": "sharegpt", "shared_prefix_groups": 2,
            "shared_prefix_tokens": 100}  # fmt: skip
    assert client.post(reverse("benchmark-suite-new"), form).status_code == 302
    suite = Suite.objects.get(name="Long context")
    plan = suite.plan()
    assert plan["dataset"] == {"kind": "sharegpt", "seed": 9} and sweep_shape(plan) == "ShareGPT"
    levels = plan_levels(plan, max_num_seqs=4)
    rates = [spec for kind, spec in levels if kind == "rate"]
    assert len(rates) == 3 and all(s.dataset == Dataset(seed=9) for s in rates)
    assert all(s.shared_prefix is None and s.arrivals.kind == "gamma" for s in rates)
    # the exact-length scenarios stay synthetic, with their shared prefix
    assert all(s.dataset is None and s.shared_prefix for k, s in levels if k == "scenario")
    assert "ShareGPT at 0.5, 1, 2.5 req/s" in client.get(reverse("benchmark-suites")).text
    # a recipe whose context cannot hold vLLM's longest ShareGPT request is refused
    short = {**plan, "scenarios": [{"name": "s", "prompt_tokens": 200, "output_tokens": 8}]}
    refusal = plan_refusal(short, max_num_seqs=4, max_model_len=1500)
    assert "reach 2,048 tokens" in refusal and "1,500" in refusal
    assert plan_refusal(short, max_num_seqs=4, max_model_len=2048) is None


def test_a_sharegpt_suite_without_the_dataset_is_refused_with_how_to_get_it(
    client_as, operator, monkeypatch, tmp_path
):
    monkeypatch.setenv("SPARKPANEL_SHAREGPT_FILE", str(tmp_path / "missing.json"))
    response = client_as(operator).post(
        reverse("benchmark-suite-new"), {**RATES, "sweep_dataset": "sharegpt"}
    )
    assert response.status_code == 400 and "does not exist" in response.content.decode()
    assert not Suite.objects.filter(name="Long context").exists()


def test_a_sweep_of_chat_sessions_gives_its_levels_conversations(client_as, operator):
    from apps.benchmarks.harness.types import Sessions

    client = client_as(operator)
    form = {**FORM, "session_turns": 4, "think_time_s": 30, "followup_tokens": 80}
    assert client.post(reverse("benchmark-suite-new"), form).status_code == 302
    plan = Suite.objects.get(name="Long context").plan()
    levels = plan_levels(plan, max_num_seqs=4)
    sweep = [spec for kind, spec in levels if kind == "sweep"]
    assert {s.sessions for s in sweep} == {Sessions(4, 30, 80)}
    assert [s.requests for s in sweep] == [8, 8, 8, 8]  # 8 per level: two whole sessions
    assert all(s.sessions is None for kind, s in levels if kind == "scenario")
    assert sweep_shape(plan).startswith("chat sessions of 4 turns (7234-token opening")
    # sessions are people: not a rate sweep, not ShareGPT
    for change in ({"sweep_mode": "rate", "rates_text": "1"}, {"sweep_dataset": "sharegpt"}):
        response = client.post(reverse("benchmark-suite-new"),
                               {**form, "name": "No", **change})  # fmt: skip
        assert response.status_code == 400 and "Chat sessions are a concurrency sweep" in (
            response.content.decode()
        )


def test_a_plan_queued_before_rate_sweeps_still_runs_its_concurrency_levels():
    plan = Suite(name="x", scenarios=[{"name": "a", "prompt_tokens": 5, "output_tokens": 2}],
                 sweep_levels=[1, 2]).plan()  # fmt: skip
    for key in ("mode", "rates", "arrivals"):
        del plan["sweep"][key]  # as jobs queued before this version stored it
    kinds = [(kind, spec.concurrency) for kind, spec in plan_levels(plan, max_num_seqs=4)]
    assert kinds == [("scenario", 1), ("sweep", 1), ("sweep", 2)]


def test_members_see_suites_but_cannot_edit_them(client_as, member):
    client = client_as(member)
    assert client.get(reverse("benchmark-suites")).status_code == 200
    assert client.post(reverse("benchmark-suite-new"), FORM).status_code == 403
    assert not Suite.objects.filter(name="Long context").exists()
