"""A job's levels exported in the format of `vllm bench serve --save-result --save-detailed`
(apps/benchmarks/vllm_bench.py), checked against a file the real `vllm bench serve`
(vllm 0.33.0, the Spark image's client) wrote against the same sparksim server: the same
keys with the same types, and the same meaning of the per-request lists."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.benchmarks import peer_files, runner, vllm_bench
from apps.benchmarks.harness.types import LevelSpec, Scenario
from apps.benchmarks.imports import job_import
from apps.benchmarks.models import J, Job, Result
from apps.hosts.models import Host
from tests.benchmarks.test_harness import level
from tests.conftest import require_service
from tests.real_vllm import fixtures as real
from tests.sparksim.conftest import NEMOTRON, NEMOTRON_FLAGS, launch

BENCH_VLLM = real.ROOT / "var" / "vllm-0.33.0" / "bin" / "vllm"
PROMPT, OUTPUT, REQUESTS, STREAMS = 32, 12, 4, 2


def vllm_bench_file(url: str, tmp) -> dict:
    """`vllm bench serve --save-result --save-detailed` against `url`, its file."""
    require_service(BENCH_VLLM.is_file(), "vllm 0.33.0 (tools/vllm_env.sh cuda)")
    snapshot = real.ensure_tiny_model()  # any real tokenizer: sparksim counts its own
    env = {**real.child_env(), "OPENAI_API_KEY": "unused"}
    argv = [
        str(BENCH_VLLM), "bench", "serve", "--backend", "openai-chat", "--base-url", url,
        "--endpoint", "/v1/chat/completions", "--model", NEMOTRON, "--tokenizer", str(snapshot),
        "--dataset-name", "random", "--input-len", str(PROMPT), "--output-len", str(OUTPUT),
        "--ignore-eos", "--num-prompts", str(REQUESTS), "--max-concurrency", str(STREAMS),
        "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(tmp),
        "--result-filename", "vllm.json", "--seed", "1",
    ]  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp / "vllm.json").read_text())


@pytest.fixture
def sim(tmp_path):
    server = launch(tmp_path, *NEMOTRON_FLAGS, time_scale=20)
    yield server
    server.stop()


def _job(qwen, quick_suite, **fields) -> Job:
    host = Host.objects.create(name=f"vb-{os.getpid()}", engine="process", simulated=True)
    return Job.objects.create(suite=quick_suite, recipe=qwen, host=host, state=J.DONE,
                              plan=quick_suite.plan(), context={"simulated": True}, **fields)  # fmt: skip


def _shape(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "list of " + ",".join(sorted({_shape(v) for v in value}))
    return type(value).__name__


@pytest.mark.services
@pytest.mark.real_vllm
@pytest.mark.django_db
def test_a_level_exports_with_the_keys_types_and_meaning_of_vllm_bench_serve(
    sim, tmp_path, qwen, quick_suite
):
    theirs = vllm_bench_file(sim.url, tmp_path)
    measured = level(sim, LevelSpec(Scenario("vb", PROMPT, OUTPUT), STREAMS, REQUESTS, 1), 20)
    job = _job(qwen, quick_suite)
    result = runner._store(job, Result.Kind.SWEEP, measured)
    ours = json.loads(json.dumps(vllm_bench.save_result(job, result)))  # as served

    missing = set(theirs) - set(ours)
    assert not missing, f"keys vLLM writes that the export lacks: {sorted(missing)}"
    for key in set(theirs) & set(ours):
        if theirs[key] is None or ours[key] is None:  # label, request_goodput: optional
            continue
        assert _shape(ours[key]) == _shape(theirs[key]), (key, ours[key], theirs[key])
    assert list(ours)[: len(list(theirs)[:9])] == list(theirs)[:9]  # the setup keys' order

    # The per-request lists mean what vLLM's mean, in both files: one entry per request;
    # an `itls` entry per chunk after the first (sparksim streams a token a chunk), whose
    # sum with the TTFT is the request's latency.
    for data in (theirs, ours):
        n = data["num_prompts"]
        assert n == REQUESTS and data["completed"] == REQUESTS and data["failed"] == 0
        for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
                    "queue_times", "generated_texts", "errors"):  # fmt: skip
            assert len(data[key]) == n, key
        assert data["output_lens"] == [OUTPUT] * n and data["errors"] == [""] * n
        for ttft, itls, latency in zip(data["ttfts"], data["itls"], data["latencies"], strict=True):
            assert len(itls) == OUTPUT - 1
            assert ttft + sum(itls) == pytest.approx(latency, rel=0.02, abs=0.005)
        assert data["total_output_tokens"] == OUTPUT * n
        assert data["request_rate"] == "inf" and data["max_concurrency"] == STREAMS
        assert data["mean_ttft_ms"] == pytest.approx(statistics.fmean(data["ttfts"]) * 1000)
        assert data["median_itl_ms"] == pytest.approx(
            statistics.median(x for r in data["itls"] for x in r) * 1000
        )
        assert data["max_concurrent_requests"] >= STREAMS
    # The file vLLM wrote imports as a read-only job whose numbers are the file's own.
    imported = job_import(levels=vllm_bench.parse(json.dumps(theirs).encode(), "vllm.json"),
                          name="vllm.json", recipe=qwen, host=job.host, user=None)  # fmt: skip
    level_in = imported.results.get()
    assert (level_in.kind, level_in.concurrency, level_in.ok) == ("sweep", STREAMS, REQUESTS)
    assert level_in.ttft_p50_s == pytest.approx(theirs["median_ttft_ms"] / 1000, rel=1e-4)
    assert level_in.metrics["ttft"]["mean"] == pytest.approx(
        theirs["mean_ttft_ms"] / 1000, rel=1e-4
    )
    assert level_in.metrics["itl"]["p99"] == pytest.approx(theirs["p99_itl_ms"] / 1000, rel=1e-3)
    assert level_in.output_tps == pytest.approx(theirs["output_throughput"], rel=1e-6)
    again = vllm_bench.save_result(imported, level_in)  # and exports as it came in
    for key in ("ttfts", "latencies", "output_lens", "input_lens", "errors"):
        assert again[key] == pytest.approx(theirs[key], abs=1e-6), key
    assert again["itls"] == [pytest.approx(x, abs=1e-6) for x in theirs["itls"]]

    # The panel's own figures are what it stored: no second computation disagrees.
    assert ours["ttfts"] == [r["ttft"] for r in result.requests]
    assert ours["input_lens"] == [PROMPT] * REQUESTS  # the harness builds exact prompts
    assert min(ours["start_times"]) == 0 and ours["sparkpanel_itls_kept"] is True
    assert ours["duration"] == pytest.approx(result.metrics["window_s"])


@pytest.mark.django_db
def test_a_level_without_stored_gaps_exports_empty_itls_and_says_so(qwen, quick_suite):
    """Results stored before the panel kept chunk gaps (or a level too large to keep
    them): the export still has every key, with empty ITL lists flagged."""
    job = _job(qwen, quick_suite)
    rows = [{"ttft": 0.5, "e2e": 2.0, "tpot": 0.1, "output_tokens": 16, "prompt_tokens": 100,
             "ok": True, "error": None}, {"ttft": None, "e2e": None, "tpot": None,
             "output_tokens": None, "prompt_tokens": None, "ok": False, "error": "http: 500"}]  # fmt: skip
    result = Result.objects.create(
        job=job, kind=Result.Kind.SCENARIO, scenario="old", prompt_tokens=100,
        output_tokens=16, concurrency=1, ok=1, failed=1, metrics={"window_s": 4.0},
        requests=rows,
    )  # fmt: skip
    data = vllm_bench.save_result(job, result)
    assert data["itls"] == [[], []] and data["sparkpanel_itls_kept"] is False
    assert data["errors"] == ["", "http: 500"] and data["completed"] == 1
    assert data["request_throughput"] == 0.25 and data["mean_itl_ms"] == 0.0
    assert data["start_times"] == [0.0, 0.0] and not math.isnan(data["std_ttft_ms"])


@pytest.mark.django_db
def test_a_rate_level_carries_its_rate_burstiness_and_cap(qwen, quick_suite):
    job = _job(qwen, quick_suite)
    job.plan["sweep"]["arrivals"].update(kind="gamma", burstiness=0.5, max_concurrency=4)
    result = Result.objects.create(job=job, kind=Result.Kind.RATE, scenario="rates 200/64",
                                   prompt_tokens=200, output_tokens=64, concurrency=4,
                                   request_rate=2.5, requests=[])  # fmt: skip
    data = vllm_bench.save_result(job, result)
    assert (data["request_rate"], data["burstiness"], data["max_concurrency"]) == (2.5, 0.5, 4)
    assert data["num_prompts"] == 0 and data["duration"] == 0.0


def _panel_job(qwen, quick_suite) -> Job:
    """A job as the runner stores one: a closed-loop level and a rate level, its rows'
    times rounded to the microsecond as the harness stores them."""
    job = _job(qwen, quick_suite)
    for kind, concurrency, rate, base in (("sweep", 2, None, 0.2), ("rate", 4, 1.5, 0.4)):
        rows = [{"ttft": round(base + i / 100, 6), "e2e": round(base + 1 + i / 100, 6), "tpot": 0.1,
                 "output_tokens": 11, "prompt_tokens": 200, "ok": True, "error": None,
                 "start": i * 0.5, "lag": None, "gaps": [0.1] * 10} for i in range(6)]  # fmt: skip
        rows.append({"ttft": None, "e2e": None, "tpot": None, "output_tokens": None,
                     "prompt_tokens": 200, "ok": False, "error": "http: 503 busy",
                     "start": 3.5, "lag": None, "gaps": []})  # fmt: skip
        Result.objects.create(job=job, kind=kind, scenario=f"{kind} level", prompt_tokens=200,
                              output_tokens=11, concurrency=concurrency, request_rate=rate,
                              ok=6, failed=1, ttft_p50_s=base + 0.025, metrics={"window_s": 5.0},
                              requests=rows)  # fmt: skip
    return job


@pytest.mark.django_db
def test_a_jobs_export_imports_back_as_the_same_levels(
    qwen, quick_suite, member, client_as, api_as
):
    job = _panel_job(qwen, quick_suite)
    client = client_as(member)
    response = client.get(f"/benchmarks/jobs/{job.pk}/vllm-bench.jsonl")
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    body = response.content
    assert len(body.splitlines()) == 2

    upload = SimpleUploadedFile("job.jsonl", body, content_type="application/x-ndjson")
    response = client.post("/benchmarks/import/", {"file": upload, "recipe": qwen.pk,
                                                   "host": job.host.pk, "note": "round trip"})  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    imported = Job.objects.exclude(pk=job.pk).get()
    assert imported.imported_from == "vllm bench serve: job.jsonl" and imported.suite is None
    assert not imported.is_active and imported.queued_by == member
    before = list(job.results.order_by("kind", "concurrency"))
    after = list(imported.results.order_by("kind", "concurrency"))
    assert [(r.kind, r.concurrency, r.request_rate, r.ok, r.failed) for r in after] == [
        (r.kind, r.concurrency, r.request_rate, r.ok, r.failed) for r in before
    ]
    for old, new in zip(before, after, strict=True):
        assert new.ttft_p50_s == pytest.approx(old.ttft_p50_s)
        keep = ("ttft", "e2e", "output_tokens", "prompt_tokens", "ok", "start", "gaps")
        assert [{k: r[k] for k in keep} for r in new.requests] == [
            {k: r[k] for k in keep} for r in old.requests
        ]
        assert [r["error"] for r in new.requests][-1] == "http: 503 busy"
    page = client.get(imported.get_absolute_url())
    assert page.status_code == 200 and b"read-only results from" in page.content
    both = client.get(f"/benchmarks/compare/?jobs={job.pk},{imported.pk}")
    assert both.status_code == 200 and b"Imported: job.jsonl" in both.content
    listed = {j["id"]: j for j in api_as(member).get("/jobs").data["items"]}
    assert listed[imported.pk]["suite_id"] is None
    assert listed[imported.pk]["imported_from"] == "vllm bench serve: job.jsonl"
    assert listed[job.pk]["imported_from"] == ""
    assert client.get(f"/benchmarks/jobs/{imported.pk}/results.json").status_code == 200


BAD_FILES = [
    (b"not json at all", "is not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b'{"duration": 1}', "not a file of `vllm bench serve"),
    (json.dumps({"duration": 1, "completed": 1, "request_rate": "inf", "ttfts": [0.1]}).encode(),
     "was the file written with --save-detailed"),
    (json.dumps({"duration": 1, "completed": 1, "request_rate": "inf", "ttfts": [0.1],
                 **{k: [0] for k in vllm_bench.PER_REQUEST if k != "ttfts"},
                 "itls": [[]], "errors": [""], "latencies": [-1]}).encode(), "below 0"),
    (b'{"duration": NaN, "completed": 0, "request_rate": "inf", "ttfts": []}', "not a number"),
    (b"\n".join([b"{}"] * 40), "at most 32 levels"),
    (b"[" * 100_000 + b"]" * 100_000, "nests its JSON too deep"),
    (b'{"duration": ' + b"9" * 5000 + b"}", "not JSON the panel can read"),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("raw", "says"), BAD_FILES)
def test_a_bad_file_is_refused_with_the_reason_and_nothing_is_saved(
    raw, says, qwen, sim_host, member, client_as
):
    upload = SimpleUploadedFile("bad.json", raw)
    response = client_as(member).post("/benchmarks/import/", {"file": upload, "recipe": qwen.pk,
                                                              "host": sim_host.pk})  # fmt: skip
    assert response.status_code == 400
    assert says in response.content.decode()
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_only_those_who_queue_benchmarks_import_and_a_too_large_file_is_refused(
    qwen, sim_host, outsider, member, client_as, settings
):
    assert client_as(outsider).get("/benchmarks/import/").status_code == 403
    page = client_as(member).get("/benchmarks/import/")
    assert page.status_code == 200 and b"--save-detailed" in page.content
    big = SimpleUploadedFile("big.json", b" " * (peer_files.MAX_FILE_BYTES + 1))
    response = client_as(member).post("/benchmarks/import/", {"file": big, "recipe": qwen.pk,
                                                              "host": sim_host.pk})  # fmt: skip
    assert response.status_code == 400 and "at most 8 MiB" in response.content.decode()
    assert not Job.objects.exists()
