"""Benchmark jobs end to end against real sparksim servers: queue, run, results, cancel,
interruption, and who may do what."""

import csv
import io
import json
import threading

import pytest
from django.urls import reverse

from apps.benchmarks import rate_selectors, runner, selectors
from apps.benchmarks.models import J, Job, Result
from apps.benchmarks.selectors import host_queue_entries
from apps.benchmarks.services import JobRefused, job_cancel, job_queue
from apps.recipes.models import Recipe
from apps.runs import runner as run_runner
from apps.runs.models import Run, RunState
from apps.runs.services import run_pin, run_start
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_starts_the_recipe_runs_the_suite_and_answers_the_capacity_question(
    sim_host, qwen_team, quick_suite, member
):
    qwen = qwen_team
    # At x10 rather than the fixture's x50 the server streams a fifth as many chunks per
    # host second, so a busy core does not flatten the throughput the sweep must show
    # rising (a CI run measured 82 tok/s at 2 users and 75 at 4 on a loaded machine at x50).
    sim_host.sim_time_scale = 10
    sim_host.save(update_fields=["sim_time_scale"])
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    assert job.state == J.QUEUED and job.plan["sweep"]["levels"] == [1, 2, 4]
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    assert job.run.state == RunState.READY and job.run.recipe == qwen  # it started the run
    assert job.context["simulated"] is True and job.context["time_scale"] == 10
    assert "sparksim" in job.context["server_version"]
    [single] = job.results.filter(kind=Result.Kind.SCENARIO)
    assert (single.prompt_tokens, single.output_tokens, single.ok) == (200, 128, 2)
    sweep = list(job.results.filter(kind=Result.Kind.SWEEP).order_by("concurrency"))
    assert [r.concurrency for r in sweep] == [1, 2, 4]
    assert all(r.complete and r.failed == 0 for r in sweep)
    # The physics: more users, more tokens in total; never faster per user (a step reads the
    # weights once for the whole batch, so at 4 users each is only slightly slower).
    assert sweep[0].output_tps < sweep[1].output_tps < sweep[2].output_tps
    assert sweep[2].decode_tps_p50 <= sweep[0].decode_tps_p50 * 1.03
    answer = selectors.capacity_answer(job)
    assert answer["users"] in (1, 2, 4) and answer["text"].startswith("This recipe serves")
    assert job.summary["capacity_users"] == answer["users"]
    # Roofline: measured decode as a share of the planner's ceiling, and plausible.
    [row] = selectors.scenario_rows(job)
    ceiling = qwen.plan(sim_host.spec()).decode_ceiling_tps
    assert row.roofline_percent == pytest.approx(single.decode_tps_p50 / ceiling * 100)
    assert 0 < row.roofline_percent < 100 and row.plausible

    # A second job reuses the ready run instead of starting another.
    again = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    runner.run_job(again.pk)
    again.refresh_from_db()
    assert again.state == J.DONE and again.run_id == job.run_id
    assert Run.objects.count() == 1
    run_runner.stop(job.run_id)


def test_a_host_serving_a_pinned_run_of_another_recipe_is_not_taken_over(
    sim_host, qwen, quick_suite, member, operator
):
    """Unpinned, a job swaps the run out at its turn (tests/benchmarks/test_swap.py)."""
    other = Recipe.objects.create(name="Other", model_id="Qwen/Qwen3-32B", total_params_b=32.8,
                                  weight_format="bf16", num_layers=64, kv_heads=8, head_dim=128,
                                  gpu_memory_utilization="0.60", max_model_len=4096, max_num_seqs=2)  # fmt: skip
    run = run_start(recipe=other, host=sim_host, user=operator)
    run_pin(run=run, user=operator)
    # Refused up front (no job that fails seconds later), naming the run and who unpins it.
    with pytest.raises(JobRefused, match=f"runs “Other” \\(run {run.pk}\\), pinned") as refused:
        job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    assert refused.value.code == "pinned" and "An operator can unpin it" in str(refused.value)
    assert not Job.objects.exists()
    assert Run.objects.get(pk=run.pk).state == RunState.QUEUED  # untouched


def test_a_cancelled_running_job_keeps_what_it_measured(sim_host, qwen, quick_suite, member):
    quick_suite.sweep_levels = [1, 2, 4, 8, 16]
    quick_suite.requests_per_level = 16
    quick_suite.save()
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    worker = threading.Thread(target=runner.run_job, args=[job.pk])
    worker.start()
    wait_for(lambda: Result.objects.filter(job=job, kind="sweep").exists(), 120, "a sweep level")
    job_cancel(job=Job.objects.get(pk=job.pk), user=member)
    worker.join(timeout=60)
    job.refresh_from_db()
    assert job.state == J.CANCELLED
    assert "kept" in job.error
    kept = job.results.filter(kind="sweep").count()
    assert 1 <= kept < 5
    run_runner.stop(job.run_id)


def test_a_queued_job_is_cancelled_at_once_and_never_runs(sim_host, qwen, quick_suite, member):
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    job_cancel(job=job, user=member)
    assert job.state == J.CANCELLED
    runner.run_job(job.pk)  # its task arrives anyway
    job.refresh_from_db()
    assert job.state == J.CANCELLED and not job.results.exists() and not Run.objects.exists()


def test_a_redelivered_job_is_interrupted_not_run_twice_and_keeps_its_results(
    sim_host, qwen, quick_suite, member
):
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    # As a worker dying mid-job leaves it: running, one level stored.
    job.move(J.QUEUED, J.RUNNING)
    Result.objects.create(job=job, kind="scenario", scenario="short", prompt_tokens=200,
                          output_tokens=128, concurrency=1, ok=2)  # fmt: skip
    runner.run_job(job.pk)  # Celery delivers it again to the next worker
    job.refresh_from_db()
    assert job.state == J.INTERRUPTED and "stopped in the middle" in job.error
    assert job.results.count() == 1 and not Run.objects.exists()


def test_reconcile_reaps_jobs_left_running_by_a_dead_worker(sim_host, qwen, quick_suite, member):
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    job.move(J.QUEUED, J.RUNNING)
    run_runner.reconcile(sim_host.pk)
    assert Job.objects.get(pk=job.pk).state == J.INTERRUPTED


def test_queue_positions_and_permissions(
    client_as, sim_host, qwen, quick_suite, member, operator, outsider
):
    from apps.accounts.roles import Role
    from apps.accounts.services import user_create

    a = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    b = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=operator)
    assert [(e.job.pk, e.position) for e in host_queue_entries(sim_host)] == [(a.pk, 1), (b.pk, 2)]
    html = client_as(member).get(reverse("benchmarks")).content.decode()
    assert f"job {a.pk}" in html and f"job {b.pk}" in html
    # Members may queue; outsiders (no role) may not even look.
    assert client_as(outsider).get(reverse("benchmarks")).status_code == 403
    response = client_as(outsider).post(reverse("benchmark-queue"),
                                        {"suite": quick_suite.pk, "recipe": qwen.pk, "host": sim_host.pk})  # fmt: skip
    assert response.status_code == 403
    response = client_as(member).post(reverse("benchmark-queue"),
                                      {"suite": quick_suite.pk, "recipe": qwen.pk, "host": sim_host.pk,
                                       "note": "nightly"})  # fmt: skip
    c = Job.objects.latest("pk")
    assert response.status_code == 302 and c.note == "nightly" and c.queued_by == member
    # A member cannot cancel someone else's job; the owner and operators can.
    other, *_ = user_create(username="mallory", password="x" * 20, role=Role.MEMBER)
    assert client_as(other).post(reverse("benchmark-cancel", args=[a.pk])).status_code == 302
    assert Job.objects.get(pk=a.pk).state == J.QUEUED
    with pytest.raises(JobRefused):
        job_cancel(job=Job.objects.get(pk=a.pk), user=other)
    client_as(operator).post(reverse("benchmark-cancel", args=[a.pk]))
    assert Job.objects.get(pk=a.pk).state == J.CANCELLED
    # Bad input keeps the form and says why.
    response = client_as(member).post(reverse("benchmark-queue"), {"suite": "", "recipe": qwen.pk,
                                                                   "note": "keep me"})  # fmt: skip
    assert response.status_code == 400 and "keep me" in response.content.decode()


def test_results_export_as_csv_and_json(client_as, sim_host, qwen, quick_suite, member):
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    job.move(J.QUEUED, J.DONE)
    Result.objects.create(job=job, kind="sweep", scenario="s", prompt_tokens=200, output_tokens=16,
                          concurrency=4, ok=4, ttft_p50_s=0.25, output_tps=120.0, decode_tps_p50=30.0,
                          metrics={"tpot": {"p50": 0.033}})  # fmt: skip
    client = client_as(member)
    rows = list(
        csv.DictReader(
            io.StringIO(client.get(reverse("benchmark-csv", args=[job.pk])).content.decode())
        )
    )
    assert rows[0]["max_concurrency"] == "4" and rows[0]["median_ttft_ms"] == "250.0"
    assert rows[0]["output_throughput"] == "120.0" and rows[0]["median_tpot_ms"] == "33.0"
    assert (rows[0]["request_rate"], rows[0]["saturated"]) == ("inf", "False")  # closed loop
    data = json.loads(client.get(reverse("benchmark-json", args=[job.pk])).content)
    assert data["results"][0]["median_decode_tok_s"] == 30.0 and data["host"] == sim_host.name
    assert data["decode_ceiling_tps"] > 0


def test_a_rate_sweep_finds_the_rate_the_recipe_holds_and_stops_past_saturation(
    client_as, sim_host, qwen_team, member
):
    """Open loop on a real sparksim server: a rate it serves, one far beyond its capacity
    (eight sequences of 128 tokens), and one that is then not run."""
    from apps.benchmarks.harness.arrivals import Arrivals, offsets
    from apps.benchmarks.models import Suite

    sim_host.sim_time_scale = 10
    sim_host.save(update_fields=["sim_time_scale"])
    suite = Suite.objects.create(
        name="rates",
        scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 16}],
        repetitions=1,
        warmup_requests=1,
        sweep_prompt_tokens=200,
        sweep_output_tokens=128,
        sweep_mode="rate",
        sweep_rates=[0.5, 200, 400],
        requests_per_level=60,
        arrival_kind="poisson",
        arrival_seed=3,
        slo_ttft_s=20.0,
        slo_tpot_s=0.2,
    )  # fmt: skip  (a generous SLO: a busy machine's delays must not decide what holds)
    job = job_queue(suite=suite, recipe=qwen_team, host=sim_host, user=member)
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    levels = list(job.results.filter(kind=Result.Kind.RATE).order_by("request_rate"))
    assert [r.request_rate for r in levels] == [0.5, 200]  # 400 not run: 200 saturated
    held, over = levels
    assert not held.metrics["saturated"] and held.complete and held.ok == 60
    due = offsets(Arrivals(rate=0.5, seed=3), 60)  # the schedule the level followed
    assert held.metrics["arrival"]["achieved_rate"] == pytest.approx(59 / due[-1], rel=0.25)
    assert over.metrics["saturated"] and not over.complete
    assert over.metrics["arrival"]["arrived"] < 60
    answer = rate_selectors.rate_answer(job)
    assert answer["rate"] == 0.5 and answer["saturated_at"] == 200 and answer["not_run"] == [400]
    assert answer["text"].startswith("Holds 0.5 requests/s of 200/128 with TTFT p95 ≤ 20 s")
    html = client_as(member).get(reverse("benchmark-job", args=[job.pk])).content.decode()
    assert "Request-rate sweep" in html and "saturated" in html and "Not run: 400 req/s" in html
    assert 'data-testid="server-during-level"' in html  # the server's KV and queue per level


def test_the_seeds_kv_observation_is_checked_on_the_results_page(
    client_as, sim_host, qwen, quick_suite, member
):
    job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
    job.move(J.QUEUED, J.DONE)

    def level(kind, concurrency, kv_peak, **server):
        server = {"samples": 5, "kv_usage_peak": kv_peak, "kv_usage_mean": kv_peak / 2,
                  "waiting_peak": 0, "preemptions": 0, **server}  # fmt: skip
        Result.objects.create(job=job, kind=kind, scenario="s", prompt_tokens=200,
                              output_tokens=128, concurrency=concurrency, ok=4,
                              metrics={"server": server})  # fmt: skip

    level("scenario", 1, 0.012)
    level("sweep", 2, 0.08)
    level("sweep", 4, 0.21, preemptions=3, prefix_hit_rate=0.0, mean_queue_s=0.4)
    level("sweep", 8, 0.95)  # not a small batch: not judged
    observation = selectors.kv_observation(job)
    assert observation["holds"]
    assert observation["text"] == ("KV cache usage — one user: peak 1.2 % (under 5 %); "
                                   "batches of up to 4: peak 21.0 % (under 30 %)")  # fmt: skip
    html = client_as(member).get(reverse("benchmark-job", args=[job.pk])).content.decode()
    assert 'data-testid="kv-observation"' in html and "peak 21.0 % (under 30 %)" in html
    assert "KV 21.0 % peak (10.5 % mean)" in html and "3 preempted" in html
    assert "queued 0.40 s mean" in html
    Result.objects.filter(job=job, concurrency=4).update(
        metrics={"server": {"samples": 5, "kv_usage_peak": 0.45}}
    )
    observation = selectors.kv_observation(job)
    assert not observation["holds"] and "peak 45.0 % (over 30 %)" in observation["text"]


@pytest.mark.parametrize(
    ("ttft_p95", "knee"),
    [
        ([0.30, 0.32, 0.35, 2.0, 6.0], 2),  # a hockey stick: flat, then queueing
        ([0.30, 0.32, 0.35, 0.50, 4.0], 4),  # flat a level longer
        ([0.30, 0.60, 0.90, 1.20, 1.50], None),  # a straight line has no knee
        ([0.30, 0.31], None),  # two levels cannot show one
    ],
)
def test_the_knee_of_a_rate_sweep_is_where_queueing_starts_to_dominate(ttft_p95, knee):
    rates = [0.5, 1, 2, 4, 8][: len(ttft_p95)]
    levels = []
    for rate, ttft in zip(rates, ttft_p95, strict=True):
        r = Result(kind="rate", request_rate=rate, ttft_p95_s=ttft, concurrency=0)
        r.arrival = {"achieved_rate": rate * 0.98}
        levels.append(r)
    assert rate_selectors.knee_rate(levels) == knee


def test_a_context_depth_sweep_shows_the_first_token_slowing_as_context_grows(
    sim_host, qwen, member
):
    from apps.benchmarks.models import Suite

    suite = Suite.objects.create(
        name="depths", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 16}],
        context_depths=[0, 6000], repetitions=2, warmup_requests=1, sweep_enabled=False,
    )  # fmt: skip
    job = job_queue(suite=suite, recipe=qwen, host=sim_host, user=member)
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    rows = {r.scenario: r for r in job.results.filter(kind=Result.Kind.SCENARIO)}
    shallow, deep = rows["context depth 0"], rows["context depth 6,000"]
    assert (shallow.prompt_tokens, deep.prompt_tokens) == (64, 6064)
    # ~6,000 more tokens to prefill: 1.30 s more on the model sparksim plays. Judged on the
    # difference, not a ratio: a busy machine's delay (a few ms of wall time is a whole
    # simulated second at the fixture's 50x) lands on both depths alike — a loaded CI run
    # read the 64-token TTFT as 1.08 s instead of 0.12 s — and cancels out here.
    from sparksim.profiles import QWEN35_35B

    more = QWEN35_35B.prefill_seconds(6064) - QWEN35_35B.prefill_seconds(64)
    assert deep.ttft_p50_s - shallow.ttft_p50_s > 0.5 * more


def test_compare_overlays_the_rate_sweeps_of_several_jobs(
    client_as, sim_host, qwen, quick_suite, member
):
    jobs = []
    for ttfts in ((0.3, 0.4, 2.0), (0.5, 0.9)):
        job = job_queue(suite=quick_suite, recipe=qwen, host=sim_host, user=member)
        job.move(J.QUEUED, J.DONE)
        for rate, ttft in zip((1, 2, 4), ttfts, strict=False):
            Result.objects.create(job=job, kind="rate", scenario="r", prompt_tokens=200,
                                  output_tokens=64, concurrency=0, request_rate=rate, ok=8,
                                  ttft_p95_s=ttft, e2e_p50_s=ttft + 2)  # fmt: skip
        jobs.append(job)
    chart = rate_selectors.rate_chart(jobs)
    assert chart["x"] == [1, 2, 4] and chart["x_label"] == "requested rate (req/s)"
    first, second = jobs
    series = {s["label"]: s["values"] for s in chart["series"]}
    assert series[f"job {first.pk} TTFT p95"] == [0.3, 0.4, 2.0]
    assert series[f"job {second.pk} TTFT p95"] == [0.5, 0.9, None]  # not measured at 4
    html = (
        client_as(member)
        .get(reverse("benchmark-compare"), {"jobs": f"{first.pk},{second.pk}"})
        .content.decode()
    )
    assert 'data-testid="compare-rates"' in html and 'id="compare-rates"' in html
    assert rate_selectors.rate_chart([]) is None


def test_a_sweep_of_chat_sessions_answers_how_many_people_chatting_the_recipe_serves(
    client_as, sim_host, qwen_team, member
):
    """The team workload: each user holds a three-turn conversation with think time; the
    answer is in those terms."""
    from apps.benchmarks.models import Suite

    sim_host.sim_time_scale = 10
    sim_host.save(update_fields=["sim_time_scale"])
    suite = Suite.objects.create(
        name="chats", scenarios=[{"name": "short", "prompt_tokens": 200, "output_tokens": 16}],
        repetitions=1, warmup_requests=1, sweep_prompt_tokens=300, sweep_output_tokens=48,
        sweep_levels=[1, 2], requests_per_level=5, session_turns=3, think_time_s=1,
        followup_tokens=40, slo_ttft_s=20.0, slo_tpot_s=0.2,
    )  # fmt: skip
    job = job_queue(suite=suite, recipe=qwen_team, host=sim_host, user=member)
    runner.run_job(job.pk)
    job.refresh_from_db()
    assert job.state == J.DONE, job.error
    levels = list(job.results.filter(kind=Result.Kind.SWEEP).order_by("concurrency"))
    assert [(r.concurrency, r.ok) for r in levels] == [(1, 6), (2, 6)]  # 5 → two sessions of 3
    for level in levels:
        turns = [row["turn"] for row in level.requests]
        assert sorted(turns) == [1, 1, 2, 2, 3, 3]
        first = [row["prompt_tokens"] for row in level.requests if row["turn"] == 1]
        last = [row["prompt_tokens"] for row in level.requests if row["turn"] == 3]
        assert first == [300, 300] and min(last) > 300 + 2 * (48 + 40)
    answer = selectors.capacity_answer(job)
    assert answer["users"] in (1, 2)
    assert (
        "in chat sessions of 3 turns (300-token opening, 40-token follow-ups, 48-token "
        "answers, 1 s think time)" in answer["text"]
    )
    html = client_as(member).get(reverse("benchmark-job", args=[job.pk])).content.decode()
    assert "chat sessions of 3 turns" in html
