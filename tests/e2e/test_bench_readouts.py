"""A member reads a finished job's results in the browser: a 2-token scenario says "too
short to time" instead of "127 % ⚠ implausible", one stream's lag says "busy machine", and
every such word explains itself on hover, on keyboard focus and in the definitions list.

The job and its results are stored directly (one `manage shell`), so nothing is run."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

STORED_JOB = """
from apps.benchmarks import selectors
from apps.benchmarks.models import J, Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from django.contrib.auth import get_user_model

suite = Suite.objects.get(is_default=True)
job = Job.objects.create(
    suite=suite, recipe=Recipe.objects.get(slug="qwen3-5-35b-max-single-user"),
    host=Host.objects.get(name="local-sim"), state=J.DONE, plan=suite_plan(suite),
    queued_by=get_user_model().objects.get(username="mia"),
)
ceiling = selectors.decode_ceiling(job)
for prompt, output, decode in ((58, 2, ceiling * 1.27), (1834, 108, ceiling * 0.8)):
    Result.objects.create(
        job=job, kind="scenario", scenario=f"{prompt}/{output}", prompt_tokens=prompt,
        output_tokens=output, concurrency=1, ok=3, ttft_p50_s=0.4, ttft_p95_s=0.4,
        e2e_p50_s=0.4 + (output - 1) / decode, decode_tps_p50=decode,
        prefill_tps_p50=prompt / 0.4, metrics={"time_scale": 1.0},
    )
Result.objects.create(
    job=job, kind="sweep", scenario="sweep", prompt_tokens=1834, output_tokens=108,
    concurrency=1, ok=4, ttft_p50_s=0.4, ttft_p95_s=0.5, ttft_p99_s=0.5, e2e_p50_s=5.0,
    decode_tps_p50=ceiling * 0.8, output_tps=ceiling * 0.8, request_rps=0.2,
    goodput_rps=0.2, metrics={"time_scale": 1.0, "diagnostics": {"client_saturated": True}},
)
print("JOB", job.pk)
"""


def test_the_results_page_says_too_short_to_time_and_explains_its_words(new_page, live_server_asgi):
    out = live_server_asgi.manage("shell", "-c", STORED_JOB)
    job_id = re.search(r"JOB (\d+)", out).group(1)
    page = new_page()
    login(page, "mia")
    page.goto(f"/benchmarks/jobs/{job_id}/")

    results = page.locator(f"#job-{job_id}-results")
    first_row = results.locator("table.table").first.locator("tbody tr").first
    expect(first_row).to_contain_text("too short to time")
    expect(first_row).not_to_contain_text("implausible")
    expect(first_row).not_to_contain_text("%")
    expect(results).to_contain_text("No published reference for this model")

    # Hover: the word carries its definition; focus: the keyboard reaches it and assistive
    # technology reads the definitions list's entry.
    short = first_row.locator("abbr.term", has_text="too short to time")
    short.hover()
    expect(short).to_have_attribute("title", re.compile(r"Fewer than 16 generated tokens"))
    short.focus()
    expect(short).to_be_focused()
    expect(short).to_have_accessible_description(re.compile(r"Fewer than 16 generated tokens"))

    # The decode chart has no bar for it, and its hover says why.
    chart = page.locator("[data-bench-chart='scenarios'][data-metric='decode_tps']")
    over = chart.locator(".u-over")
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.25, box["y"] + box["height"] / 2)
    expect(chart.locator(".u-legend")).to_contain_text("too short to time")

    # One stream whose client lagged: a busy machine, not a saturated client.
    sweep_row = results.locator("table.table").nth(1).locator("tbody tr").first
    busy = sweep_row.locator("abbr.term", has_text="busy machine")
    expect(busy).to_have_attribute("title", re.compile(r"At one stream"))
    expect(sweep_row).not_to_contain_text("saturated")

    # Every underlined word on the page has a title and its entry in the definitions.
    page.get_by_text("How these numbers are defined").click()
    expect(page.locator("#term-too-short-to-time")).to_be_visible()
    expect(page.locator("#term-busy-machine")).to_contain_text("something else kept the machine")
    missing = page.evaluate(
        """() => [...document.querySelectorAll('abbr.term')]
            .filter(a => !a.title || (a.getAttribute('aria-describedby') &&
                    !document.getElementById(a.getAttribute('aria-describedby'))))
            .map(a => a.textContent)"""
    )
    assert missing == []
    assert page.locator("abbr.term").count() > 10
