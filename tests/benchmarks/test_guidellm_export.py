"""A job exported as GuideLLM's report JSON (apps/benchmarks/guidellm_format.py `report`),
checked with GuideLLM's own code (0.8.1, tools/peers_env.sh): its pydantic model reads the
file, recomputes every request's computed fields and recompiles every benchmark's metrics
from the exported requests (`GenerativeMetrics.compile`), which must say what the file
says; the file imports back as the same levels; and the page serves it."""

from __future__ import annotations

import json
import math
import os
import subprocess

import pytest

from apps.benchmarks import guidellm_format, guidellm_stats, runner
from apps.benchmarks.harness.arrivals import Arrivals
from apps.benchmarks.harness.types import SLO, LevelSpec, Scenario
from apps.benchmarks.imports import job_import
from apps.benchmarks.models import J, Job, Result
from apps.hosts.models import Host
from tests.benchmarks.test_harness import level
from tests.conftest import ROOT, require_service
from tests.sparksim.conftest import NEMOTRON_FLAGS, launch

GUIDELLM_PYTHON = ROOT / "var" / "guidellm-0.8.1" / "bin" / "python"
PROMPT, OUTPUT, STREAMS, REQUESTS, SCALE = 32, 12, 2, 6, 20

# Run in GuideLLM's venv: load the report with its model, dump it back (the computed
# fields recomputed from the timings) and recompile each benchmark's metrics from its
# requests with GuideLLM's accumulator and GenerativeMetrics.compile.
RECOMPILE = """
import json, sys
from guidellm.benchmark.schemas.accumulator import (GenerativeBenchmarkAccumulator,
    GenerativeBenchmarkTimings, GenerativeRequestsAccumulator)
from guidellm.benchmark.schemas.metrics import GenerativeMetrics
from guidellm.benchmark.schemas.report import GenerativeBenchmarksReport

report = GenerativeBenchmarksReport.load_file(sys.argv[1])
metrics = []
for bench in report.benchmarks:
    sm, groups = bench.scheduler_metrics, bench.requests
    accumulator = GenerativeBenchmarkAccumulator(
        config=bench.config,
        timings=GenerativeBenchmarkTimings(request_start=sm.request_start_time,
            measure_start=sm.measure_start_time, measure_end=sm.measure_end_time,
            request_end=sm.request_end_time),
        completed=GenerativeRequestsAccumulator(requests_stats=groups.successful),
        errored=GenerativeRequestsAccumulator(requests_stats=groups.errored),
        incomplete=GenerativeRequestsAccumulator(requests_stats=groups.incomplete))
    metrics.append(GenerativeMetrics.compile(accumulator).model_dump(mode="json"))
plans = [b.profile.model_dump(mode="json") for b in report.config.get_benchmarks()]
json.dump({"report": report.model_dump(mode="json"), "metrics": metrics, "plans": plans},
          sys.stdout)
"""


# GuideLLM's DistributionSummary on the same inputs as guidellm_stats' port of it.
SUMMARIES = """
import json, sys
from guidellm.schemas import DistributionSummary as D

out = []
for kind, items, start, end in json.load(open(sys.argv[1])):
    items = [tuple(i) if isinstance(i, list) else i for i in items]
    if kind == "values":
        out.append(D.from_values(items))
    elif kind == "rate":
        out.append(D.rate_distribution_from_timings(items, start_time=start, end_time=end))
    else:
        out.append(D.concurrency_distribution_from_timings(items, start_time=start,
                                                           end_time=end))
json.dump([s.model_dump(mode="json") for s in out], sys.stdout)
"""
T = 1_790_000_000.0  # epoch seconds, as a report's times are
SUMMARY_CASES = [
    ("values", [3.0, 1.0, 2.0, 2.0, 5.5], None, None),
    ("values", [(2.0, 3.0), (1.0, 0.0), (4.0, 1.5), (2.0, 1.0)], None, None),
    ("values", [(7.0, 0.0), (8.0, 0.0)], None, None),  # no weight at all
    ("values", [], None, None),
    # events closer than GuideLLM's 0.1 ms merge; the window cuts and pads the rest
    ("rate", [T + 0.1, T + 0.10004, T + 0.10009, T + 0.1002, T + 0.5, (T + 0.7, 12.0),
              T + 0.7, T + 2.0], T + 0.05, T + 1.0),
    ("rate", [(T + 1, 3.0)], None, None),
    ("concurrency", [(T, T + 1.0), (T + 0.2, T + 0.6), (T + 0.6, T + 0.60005, 4.0),
                     (T + 0.9, T + 3.0), (T + 2.5, T + 2.5)], T + 0.1, T + 2.0),
    ("concurrency", [(T, T)], None, None),
    ("concurrency", [], T, T + 1.0),
]  # fmt: skip


@pytest.mark.services
def test_the_summaries_are_guidellms_own(tmp_path):
    require_service(GUIDELLM_PYTHON.is_file(), "GuideLLM 0.8.1 (tools/peers_env.sh guidellm)")
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(SUMMARY_CASES))
    proc = subprocess.run([str(GUIDELLM_PYTHON), "-c", SUMMARIES, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    ours = {"values": guidellm_stats.summary, "rate": guidellm_stats.rate_summary,
            "concurrency": guidellm_stats.concurrency_summary}  # fmt: skip
    for (kind, items, start, end), theirs in zip(SUMMARY_CASES, json.loads(proc.stdout),
                                                 strict=True):  # fmt: skip
        mine = ours[kind](items) if kind == "values" else ours[kind](items, start, end)
        problems = _differences(mine, theirs, f"{kind} {items!r:.60}")
        assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Two levels measured on sparksim: a closed loop at 2 streams and Poisson arrivals."""
    sim = launch(tmp_path_factory.mktemp("guidellm-export"), *NEMOTRON_FLAGS, time_scale=SCALE)
    try:
        closed = level(sim, LevelSpec(Scenario("gx", PROMPT, OUTPUT), STREAMS, REQUESTS, 1),
                       SCALE, SLO(2.0, 0.1))  # fmt: skip
        arrivals = Arrivals(rate=4.0, kind="poisson", seed=3, max_concurrency=4)
        rate = level(sim, LevelSpec(Scenario("gx", PROMPT, OUTPUT), 1, REQUESTS, 1,
                                    arrivals=arrivals), SCALE, SLO(2.0, 0.1))  # fmt: skip
    finally:
        sim.stop()
    assert closed.ok == REQUESTS and rate.ok == REQUESTS, (closed.errors, rate.errors)
    return closed, rate


FAILED = [
    {"ttft": None, "e2e": None, "tpot": None, "output_tokens": None, "prompt_tokens": PROMPT,
     "ok": False, "error": "http: 503 busy", "start": 0.05, "lag": None, "gaps": []},
    {"ttft": None, "e2e": None, "tpot": None, "output_tokens": None, "prompt_tokens": PROMPT,
     "ok": False, "error": "incomplete: cancelled before it finished", "start": 0.07,
     "lag": None, "gaps": []},
]  # fmt: skip


def _job(qwen, quick_suite, measured) -> Job:
    """A job as the runner stores one: the two measured levels, and a scenario level whose
    rows add an errored and a cancelled request to the closed loop's."""
    host = Host.objects.create(name=f"gx-{os.getpid()}", engine="process", simulated=True)
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=host, state=J.DONE,
                             plan=quick_suite.plan(), context={"simulated": True})  # fmt: skip
    closed, rate = measured
    runner._store(job, Result.Kind.SWEEP, closed)
    runner._store(job, Result.Kind.RATE, rate)
    scenario = runner._store(job, Result.Kind.SCENARIO, closed)
    scenario.concurrency, scenario.requests = 1, scenario.requests + FAILED
    scenario.failed += len(FAILED)
    scenario.save()
    return job


def _guidellm(data: dict, tmp_path) -> dict:
    require_service(GUIDELLM_PYTHON.is_file(), "GuideLLM 0.8.1 (tools/peers_env.sh guidellm)")
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    proc = subprocess.run([str(GUIDELLM_PYTHON), "-c", RECOMPILE, str(path)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def _differences(ours, theirs, where: str = "") -> list[str]:
    """Where `theirs` does not hold what `ours` says (every key of ours, floats to 1e-9)."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return [f"{where}: {theirs!r} is not an object"]
        return [d for k, v in ours.items()
                for d in (_differences(v, theirs[k], f"{where}.{k}") if k in theirs
                          else [f"{where}.{k}: missing"])]  # fmt: skip
    if isinstance(ours, list | tuple):
        if not isinstance(theirs, list | tuple) or len(ours) != len(theirs):
            return [f"{where}: {len(ours)} items, GuideLLM {theirs!r:.80}"]
        return [d for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                for d in _differences(a, b, f"{where}[{i}]")]  # fmt: skip
    if isinstance(ours, float) and isinstance(theirs, int | float) and not isinstance(theirs, bool):
        return [] if math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-9) else [
            f"{where}: {ours!r} vs GuideLLM {theirs!r}"]  # fmt: skip
    return [] if ours == theirs else [f"{where}: {ours!r} vs GuideLLM {theirs!r}"]


@pytest.mark.services
@pytest.mark.django_db
def test_a_job_exports_as_a_report_guidellm_reads_and_recomputes_alike(
    measured, qwen, quick_suite, tmp_path
):
    job = _job(qwen, quick_suite, measured)
    ours = json.loads(json.dumps(guidellm_format.report(job)))  # as served
    theirs = _guidellm(ours, tmp_path)

    # GuideLLM's model holds everything the file says, its computed fields included.
    problems = _differences(ours, theirs["report"], "report")
    assert not problems, "\n".join(problems[:40])
    # Its metrics, recompiled from the exported requests, are the file's.
    assert len(theirs["metrics"]) == 3
    for i, (bench, compiled) in enumerate(zip(ours["benchmarks"], theirs["metrics"], strict=True)):
        problems = _differences(bench["metrics"], compiled, f"benchmarks[{i}].metrics")
        assert not problems, "\n".join(problems[:40])
    # The config is a scenario GuideLLM can run: each level's strategy, in order.
    assert theirs["plans"] == [
        {**theirs["plans"][0], "kind": "concurrent", "streams": [STREAMS]},
        {**theirs["plans"][1], "kind": "poisson", "rate": [4.0], "max_concurrency": 4},
        {**theirs["plans"][2], "kind": "concurrent", "streams": [1]},
    ]

    # What was measured is what the file says, in GuideLLM's units.
    sweep, rate, _ = job.results.order_by("pk")
    closed = ours["benchmarks"][0]
    assert closed["config"]["strategy"]["type_"] == "concurrent"
    ttfts = sorted(r["time_to_first_token_ms"] for r in closed["requests"]["successful"])
    assert ttfts == pytest.approx(sorted(r["ttft"] * 1000 for r in sweep.requests), abs=1e-3)
    latencies = sorted(r["request_latency"] for r in closed["requests"]["successful"])
    assert latencies == pytest.approx(sorted(r["e2e"] for r in sweep.requests), abs=1e-6)
    first = closed["requests"]["successful"][0]
    assert first["info"]["timings"]["token_iterations"] == len(sweep.requests[0]["gaps"]) + 1
    assert first["output_tokens"] == OUTPUT and first["prompt_tokens"] == PROMPT
    assert closed["duration"] == pytest.approx(sweep.metrics["window_s"], abs=1e-6)
    assert closed["metrics"]["request_dispatch_delay"] is None  # a closed loop: no schedule
    # An open loop: each request was due `lag` before it went.
    poisson = ours["benchmarks"][1]
    delays = [r["request_dispatch_delay"] for r in poisson["requests"]["successful"]]
    assert delays == pytest.approx([r["lag"] for r in rate.requests], abs=1e-6)
    assert poisson["metrics"]["request_dispatch_delay"]["successful"]["count"] == REQUESTS
    # The failed rows: errored and cancelled, with their reasons and no latency.
    failed = ours["benchmarks"][2]["requests"]
    assert [r["info"]["error"] for r in failed["errored"]] == ["http: 503 busy"]
    assert [r["info"]["status"] for r in failed["incomplete"]] == ["cancelled"]
    assert failed["errored"][0]["request_latency"] is None
    assert ours["benchmarks"][2]["metrics"]["request_totals"] == {
        "successful": REQUESTS, "errored": 1, "incomplete": 1, "total": REQUESTS + 2}  # fmt: skip
    # The SLO is the suite's, judged GuideLLM's way.
    assert ours["config"]["spec"]["metrics"]["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 100.0}
    # (from the level's own rows: a busy machine may push a request past the SLO)
    meets = [r["ttft"] <= 2.0 and r["tpot"] <= 0.1 for r in sweep.requests]
    assert closed["metrics"]["slo_attainment"] == pytest.approx(sum(meets) / len(meets))
    assert ours["benchmarks"][2]["metrics"]["slo_determined_requests"] == REQUESTS + 1


@pytest.mark.services
@pytest.mark.django_db
def test_an_exported_job_imports_back_as_the_same_levels(measured, qwen, quick_suite, sim_host):
    job = _job(qwen, quick_suite, measured)
    data = json.loads(json.dumps(guidellm_format.report(job)))
    levels = guidellm_format.levels_of(data, "job.json")
    imported = job_import(levels=levels, name="job.json", source=guidellm_format.FORMAT,
                          recipe=qwen, host=sim_host, user=None)  # fmt: skip
    assert imported.plan["imported"]["model_id"] == qwen.model_id
    before = list(job.results.order_by("pk"))
    after = list(imported.results.order_by("pk"))
    assert [(r.concurrency, r.request_rate, r.ok, r.failed) for r in after] == [
        (r.concurrency, r.request_rate, r.ok, r.failed) for r in before
    ]
    for old, new in zip(before, after, strict=True):
        assert new.ttft_p50_s == pytest.approx(old.ttft_p50_s, abs=2e-6)
        assert new.e2e_p50_s == pytest.approx(old.e2e_p50_s, abs=2e-6)
        assert new.output_tps == pytest.approx(old.output_tps, rel=1e-5)
        new_rows, old_rows = (sorted(r.requests, key=lambda r: r["start"]) for r in (new, old))
        for key in ("output_tokens", "prompt_tokens", "ok"):
            assert [r[key] for r in new_rows] == [r[key] for r in old_rows], key
        for key in ("ttft", "e2e", "start"):
            ours = [r[key] for r in new_rows if r["ok"]]
            assert ours == pytest.approx([r[key] for r in old_rows if r["ok"]], abs=2e-6), key


@pytest.mark.django_db
def test_the_page_serves_the_report_to_members_and_says_why_it_cannot(
    qwen, quick_suite, member, client_as, client
):
    host = Host.objects.create(name=f"gp-{os.getpid()}", engine="process", simulated=True)
    job = Job.objects.create(suite=quick_suite, recipe=qwen, host=host, state=J.DONE,
                             plan=quick_suite.plan(), context={"simulated": True})  # fmt: skip
    rows = [{"ttft": 0.2 + i / 100, "e2e": 1.2 + i / 100, "tpot": 0.1, "output_tokens": 11,
             "prompt_tokens": 200, "ok": True, "error": None, "start": i * 0.5, "lag": None,
             "gaps": [0.1] * 10} for i in range(4)]  # fmt: skip
    Result.objects.create(job=job, kind="sweep", scenario="sweep 200/11", prompt_tokens=200,
                          output_tokens=11, concurrency=2, ok=4, metrics={"window_s": 3.0},
                          requests=rows)  # fmt: skip
    url = f"/benchmarks/jobs/{job.pk}/guidellm.json"

    anonymous = client.get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    response = client_as(member).get(url)
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == (
        f'attachment; filename="sparkpanel-job-{job.pk}-guidellm.json"'
    )
    data = response.json()
    assert data["metadata"]["version"] == 2 and len(data["benchmarks"]) == 1
    assert data["benchmarks"][0]["metrics"]["request_totals"]["successful"] == 4
    page = client_as(member).get(job.get_absolute_url())
    assert url.encode() in page.content and b"GuideLLM JSON" in page.content

    assert client_as(member).get("/benchmarks/jobs/999999/guidellm.json").status_code == 404
    assert client_as(member).post(url).status_code == 405
    # Arrivals GuideLLM has no strategy for: refused with the reason, never mislabelled.
    job.plan["sweep"]["arrivals"].update(kind="gamma", burstiness=0.5)
    job.save()
    Result.objects.create(job=job, kind="rate", scenario="rates 200/11", prompt_tokens=200,
                          output_tokens=11, concurrency=0, request_rate=2.0, requests=rows)  # fmt: skip
    refused = client_as(member).get(url)
    assert refused.status_code == 409
    assert "gamma arrivals (burstiness 0.5)" in refused.content.decode()
    empty = Job.objects.create(suite=quick_suite, recipe=qwen, host=host, plan=quick_suite.plan())
    refused = client_as(member).get(f"/benchmarks/jobs/{empty.pk}/guidellm.json")
    assert refused.status_code == 409 and "no measured levels yet" in refused.content.decode()


def test_an_imported_open_loop_without_a_gamma_shape_is_constant_arrivals():
    """GuideLLM's "constant" profile (and the panel's own export of constant arrivals) carries
    no burstiness: it imports as constant, so a re-export says constant again, not Poisson."""
    from apps.benchmarks.imports import _plan
    from apps.benchmarks.peer_files import ImportedLevel

    def level(rate, burstiness):
        return ImportedLevel(request_rate=rate, max_concurrency=None, burstiness=burstiness,
                             prompt_tokens=32, output_tokens=12, duration=1.0, rows=[{}],
                             model_id="m", date="", backend="openai-chat", label="",
                             goodput=None)  # fmt: skip

    def kind(*levels):
        return _plan("f.json", "GuideLLM", list(levels), {})["sweep"]["arrivals"]["kind"]

    assert kind(level(2.0, None)) == "constant"
    assert kind(level(2.0, 1.0)) == "poisson" and kind(level(2.0, 0.5)) == "gamma"
    assert kind(level(None, None)) == "poisson"  # a closed loop: no arrivals at all
