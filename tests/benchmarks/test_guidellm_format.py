"""GuideLLM reports imported as read-only jobs (apps/benchmarks/guidellm_format.py), checked
on a report the real GuideLLM (0.8.1, tools/peers_env.sh) wrote against sparksim."""

from __future__ import annotations

import copy
import json
import statistics
import subprocess

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.benchmarks import guidellm_format
from apps.benchmarks.imports import job_import
from apps.benchmarks.models import Job
from apps.benchmarks.peer_files import FileProblem
from tests.conftest import ROOT, require_service
from tests.real_vllm import fixtures as real
from tests.sparksim.conftest import NEMOTRON, NEMOTRON_FLAGS, launch

GUIDELLM = ROOT / "var" / "guidellm-0.8.1" / "bin" / "guidellm"
REQUESTS, STREAMS = 4, 2


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    """`guidellm run` (a concurrent profile, 2 streams, 4 requests) against sparksim."""
    require_service(GUIDELLM.is_file(), "GuideLLM 0.8.1 (tools/peers_env.sh guidellm)")
    tmp = tmp_path_factory.mktemp("guidellm")
    sim = launch(tmp, *NEMOTRON_FLAGS, time_scale=20)
    try:
        snapshot = real.ensure_tiny_model()  # a real tokenizer for its synthetic prompts
        argv = [
            str(GUIDELLM), "run",
            "--backend", f"kind=openai_http,target={sim.url},model={NEMOTRON}",
            "--profile", f"kind=concurrent,streams={STREAMS}",
            "--constraint", f"kind=max_requests,count={REQUESTS}",
            "--data", "kind=synthetic_text,prompt_tokens=32,output_tokens=12",
            "--tokenizer", f"kind=huggingface_auto,model={snapshot}",
            "--output", f"kind=json,path={tmp / 'report.json'}", "--disable-progress",
        ]  # fmt: skip
        proc = subprocess.run(argv, env=real.child_env(), cwd=tmp, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        sim.stop()
    return json.loads((tmp / "report.json").read_text())


@pytest.mark.services
@pytest.mark.django_db
def test_a_report_guidellm_wrote_imports_with_its_own_numbers(report, qwen, sim_host, member,
                                                               client_as):  # fmt: skip
    upload = SimpleUploadedFile("benchmarks.json", json.dumps(report).encode())
    response = client_as(member).post("/benchmarks/import/", {"file": upload, "recipe": qwen.pk,
                                                              "host": sim_host.pk})  # fmt: skip
    assert response.status_code == 302, response.content.decode()[-2000:]
    job = Job.objects.get()
    assert job.imported_from == "GuideLLM: benchmarks.json" and job.plan["imported"]["model_id"]
    level = job.results.get()
    assert (level.kind, level.concurrency, level.ok, level.failed) == (
        "sweep",
        STREAMS,
        REQUESTS,
        0,
    )

    bench = report["benchmarks"][0]
    theirs = bench["requests"]["successful"]
    ttfts = sorted(r["time_to_first_token_ms"] / 1000 for r in theirs)
    assert sorted(r["ttft"] for r in level.requests) == pytest.approx(ttfts, abs=1e-6)
    summary = bench["metrics"]["time_to_first_token_ms"]["successful"]
    assert level.metrics["ttft"]["mean"] == pytest.approx(summary["mean"] / 1000, rel=1e-4)
    assert level.ttft_p50_s == pytest.approx(statistics.median(ttfts), abs=1e-6)
    assert [r["output_tokens"] for r in level.requests] == [r["output_tokens"] for r in
                                                            sorted(theirs, key=lambda r: r["request_start_time"])]  # fmt: skip
    out = sum(r["output_tokens"] for r in theirs)
    assert level.output_tps == pytest.approx(out / bench["duration"], rel=1e-6)
    assert all(r["gaps"] == [] for r in level.requests)  # GuideLLM keeps no token timeline
    assert min(r["start"] for r in level.requests) == 0
    page = client_as(member).get(job.get_absolute_url())
    assert page.status_code == 200 and b"read-only results from <strong>GuideLLM" in page.content


@pytest.mark.services
def test_each_guidellm_strategy_maps_to_a_level_of_the_panels(report):
    def level_of(**strategy):
        data = copy.deepcopy(report)
        data["benchmarks"][0]["config"]["strategy"] = strategy
        return guidellm_format.levels_of(data, "r.json")[0]

    sync = level_of(type_="synchronous")
    assert (sync.request_rate, sync.max_concurrency) == (None, 1)
    poisson = level_of(type_="poisson", rate=4.0, max_concurrency=8)
    assert (poisson.request_rate, poisson.max_concurrency, poisson.burstiness) == (4.0, 8, 1.0)
    constant = level_of(type_="constant", rate=2.5)
    assert (constant.request_rate, constant.max_concurrency, constant.burstiness) == (
        2.5,
        None,
        None,
    )
    with pytest.raises(FileProblem, match="“replay” strategy"):
        level_of(type_="replay")


@pytest.mark.services
def test_a_report_the_panel_cannot_read_says_why(report):
    old = copy.deepcopy(report)
    old["metadata"]["version"] = 1
    with pytest.raises(FileProblem, match="schema version 1"):
        guidellm_format.levels_of(old, "old.json")
    broken = copy.deepcopy(report)
    del broken["benchmarks"][0]["requests"]["successful"][0]["request_latency"]
    with pytest.raises(FileProblem, match="without its latency"):
        guidellm_format.levels_of(broken, "broken.json")
    empty = copy.deepcopy(report)
    empty["benchmarks"] = []
    with pytest.raises(FileProblem, match="holds no benchmarks"):
        guidellm_format.levels_of(empty, "empty.json")
    assert not guidellm_format.is_report({"benchmarks": []})  # a vLLM-ish file: not GuideLLM


@pytest.mark.services
@pytest.mark.django_db
def test_a_request_without_its_prompt_count_imports_without_a_prefill_rate(report, qwen, sim_host):
    data = copy.deepcopy(report)
    for request in data["benchmarks"][0]["requests"]["successful"]:
        request["prompt_tokens"] = None  # GuideLLM writes null when it could not count
    levels = guidellm_format.levels_of(data, "no-prompts.json")
    job = job_import(levels=levels, name="no-prompts.json", source=guidellm_format.FORMAT,
                     recipe=qwen, host=sim_host, user=None)  # fmt: skip
    level = job.results.get()
    assert level.ok == REQUESTS and level.prefill_tps_p50 is None and level.ttft_p50_s > 0
