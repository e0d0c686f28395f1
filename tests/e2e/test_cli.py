"""Nightly CI with the command line: a member's API token (made with `manage.py apitoken`),
then `sparkpanel queue`, `wait` and `results` as subprocesses against the live panel, a
real benchmark on the simulated Spark."""

import csv
import io
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

RECIPE = "qwen3-5-35b-max-single-user"
SUITE = "Quick check"  # one single-stream scenario (1834/32) and a sweep at 1, 2 and 4


def sparkpanel(live, token: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SPARKPANEL_"))}
    env.update(SPARKPANEL_URL=live.url, SPARKPANEL_TOKEN=token, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "sparkcli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_ci_queues_a_suite_waits_and_fetches_the_results_from_the_command_line(idle_demo_host):
    live = idle_demo_host
    token = live.manage("apitoken", "mia", "--name", "cli-test").strip()
    assert token.startswith("spk_") and "\n" not in token

    queue = ["queue", "--recipe", RECIPE, "--host", "local-sim", "--suite", SUITE,
             "--note", "cli e2e", "--idempotency-key", f"e2e-{uuid.uuid4()}"]  # fmt: skip
    first = sparkpanel(live, token, *queue)
    assert first.returncode == 0, first.stderr
    job_id = int(first.stdout)
    # A CI step rerun with the same key gets the same job back instead of queueing another.
    again = sparkpanel(live, token, *queue)
    assert again.returncode == 0, again.stderr
    assert int(again.stdout) == job_id and "already queued" in again.stderr

    waited = sparkpanel(live, token, "wait", str(job_id), "--timeout", "150", "--interval", "0.3",
                        timeout=180)  # fmt: skip
    assert waited.returncode == 0, (waited.stdout, waited.stderr)
    # Not a terminal: plain progress lines as the job moves, then the verdict.
    # (The simulated Spark measures in about a second, so which steps a poll catches varies.)
    assert re.search(rf"^job {job_id} (preparing|running) \[[#.]{{20}}\] ", waited.stderr, re.M)
    assert f"job {job_id} done [####################] 100 %" in waited.stderr
    assert any(line.startswith(f"job {job_id} done in ") for line in waited.stderr.splitlines())

    as_csv = sparkpanel(live, token, "results", str(job_id), "--format", "csv")
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    shapes = [(r["kind"], r["input_len"], r["output_len"], r["max_concurrency"]) for r in rows]
    assert shapes == [("scenario", "1834", "32", "1")] + [
        ("sweep", "1834", "32", str(c)) for c in (1, 2, 4)
    ]
    assert all(float(r["median_decode_tok_s"]) > 0 and float(r["median_ttft_ms"]) > 0 for r in rows)
    assert {r["host"] for r in rows} == {"local-sim"} and {r["simulated"] for r in rows} == {"True"}

    as_json = sparkpanel(live, token, "results", str(job_id), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["job"] == job_id and data["state"] == "done" and data["suite"]["name"] == SUITE
    decode = {(r["kind"], r["max_concurrency"]): r["median_decode_tok_s"] for r in data["results"]}
    assert decode == {
        k: float(r["median_decode_tok_s"])
        for k, r in zip(
            [("scenario", 1), ("sweep", 1), ("sweep", 2), ("sweep", 4)], rows, strict=True
        )
    }
    assert data["capacity"]["tested_up_to"] == 4
