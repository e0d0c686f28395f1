"""The Usage page's chart says what it plots (issue 43, item 1): its x axis and the legend's
x entry name the bucket (day or hour), not the benchmark's "scenario (input/output tokens)",
and its y axis reads "tokens", not "tokens (tokens)". A benchmark's scenario chart beside it
keeps its own labels.

uPlot draws axis labels on a canvas, so the test reads them from the chart instance that
static/js/bench-charts.js leaves on its element (`_plot`). Rows are stored directly."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

STORED = """
import uuid
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.utils import timezone
from apps.gateway.models import UsageRecord
from apps.benchmarks.models import J, Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.models import Host
from apps.recipes.models import Recipe

mia = get_user_model().objects.get(username="mia")
for hours, prompt, completion in ((30, 120, 40), (2, 300, 90)):
    UsageRecord.objects.create(
        request_id=uuid.uuid4().hex, at=timezone.now() - timedelta(hours=hours), user=mia,
        endpoint="chat/completions", model="usage-chart-model", prompt_tokens=prompt,
        completion_tokens=completion, duration_ms=100, status=200,
    )
suite = Suite.objects.get(is_default=True)
job = Job.objects.create(
    suite=suite, recipe=Recipe.objects.get(slug="qwen3-5-35b-max-single-user"),
    host=Host.objects.get(name="local-sim"), state=J.DONE, plan=suite_plan(suite), queued_by=mia,
)
Result.objects.create(
    job=job, kind="scenario", scenario="1834/108", prompt_tokens=1834, output_tokens=108,
    concurrency=1, ok=3, ttft_p50_s=0.4, ttft_p95_s=0.4, e2e_p50_s=5.0, decode_tps_p50=22.0,
    prefill_tps_p50=4585.0, metrics={"time_scale": 1.0},
)
print("JOB", job.pk)
"""

LABELS = """(el) => {
  const u = el._plot;
  return {x: u.axes[0].label, y: u.axes[1].label, legend: u.series.map((s) => s.label)};
}"""


def _labels(page, selector: str) -> dict:
    chart = page.locator(selector)
    expect(chart.locator("canvas")).to_have_count(1)
    return chart.evaluate(LABELS)


def test_the_usage_chart_names_its_buckets_and_says_tokens_once(new_page, live_server_asgi):
    job_id = re.search(r"JOB (\d+)", live_server_asgi.manage("shell", "-c", STORED)).group(1)
    page = new_page()
    login(page, "mia")

    page.goto("/usage/?days=7&by=day")
    labels = _labels(page, "[data-bench-data='usage-chart']")
    assert labels == {
        "x": "day",
        "y": "tokens",
        "legend": ["day", "prompt tokens", "completion tokens"],
    }

    page.goto("/usage/?days=7&by=hour")
    labels = _labels(page, "[data-bench-data='usage-chart']")
    assert (labels["x"], labels["y"], labels["legend"][0]) == ("hour", "tokens", "hour")

    # A benchmark's scenario bars keep the benchmark's words.
    page.goto(f"/benchmarks/jobs/{job_id}/")
    ttft = _labels(page, "[data-bench-chart='scenarios'][data-metric='ttft_s']")
    assert (ttft["x"], ttft["y"], ttft["legend"][0]) == (
        "scenario (input/output tokens)",
        "TTFT (s)",
        "scenario",
    )
    # ...and the decode rate's label, which names its unit, no longer says it twice.
    decode = _labels(page, "[data-bench-chart='scenarios'][data-metric='decode_tps']")
    assert decode["y"] == "decode tok/s"
