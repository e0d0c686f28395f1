"""A member queues the default suite for the official Nemotron recipe on the simulated
Spark, watches it progress live, and reads the curve and the capacity answer."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login, pick_host

pytestmark = pytest.mark.e2e

# A function, not an expression (the pages' CSP refuses eval()).
WIDE_CHART = """(kind) => {
  const canvas = document.querySelector(`[data-bench-chart='${kind}'] canvas`);
  return canvas !== null && canvas.getBoundingClientRect().width > 100;
}"""


def test_member_queues_the_default_suite_and_sees_the_curve_and_capacity(new_page, idle_demo_host):
    page = new_page()
    login(page, "mia")
    page.get_by_role("link", name="Benchmarks", exact=True).click()
    page.get_by_label("Suite").select_option(label="Default: seed table + concurrency sweep")
    page.get_by_label("Recipe").select_option(
        label="Nemotron-3-Super 120B — official vLLM Spark recipe"
    )
    pick_host(page.get_by_label("Host"), "local-sim")
    page.get_by_label("Note").fill("first look")
    page.get_by_role("button", name="Queue").click()
    expect(
        page.get_by_role("heading", name=re.compile(r"^Benchmark job \d+: Nemotron"))
    ).to_be_visible()

    badge = page.locator("[id$='-progress'] .state-badge")
    # Live over /ws/events/: preparing (the model loads), running with a progress bar, done.
    expect(badge).to_have_text(re.compile("Preparing the model|Running|Done"), timeout=30_000)
    expect(badge).to_have_text("Running", timeout=180_000)
    expect(page.get_by_role("progressbar", name="Benchmark progress")).to_be_visible()
    expect(badge).to_have_text("Done", timeout=240_000)

    # Single-stream results next to the published figures, with the roofline.
    results = page.locator("[id$='-results']")
    expect(results).to_contain_text("7234/124")
    expect(results).to_contain_text("seed 22.9")
    expect(results).to_contain_text(re.compile(r"\d+ %"))
    # The capacity answer and the charts, drawn in the browser.
    expect(page.locator(".capacity-answer")).to_contain_text(
        re.compile(r"serves \d+ concurrent user|No measured level")
    )
    for kind in ("scenarios", "curve", "lines"):
        chart = page.locator(f"[data-bench-chart='{kind}'] canvas").first
        expect(chart).to_be_visible()
        # Measured in the page: a live re-render may swap the chart in between a locator's
        # check and a measurement (a bounding box of None once in CI).
        page.wait_for_function(WIDE_CHART, arg=kind, timeout=15_000)
    expect(page.locator(".bench-chart").first).not_to_contain_text("Chart unavailable")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()  # nothing left to cancel
    # The queue page lists it as finished, ready to compare.
    job_id = re.search(r"/jobs/(\d+)/", page.url).group(1)
    page.get_by_role("link", name="Benchmarks", exact=True).click()
    row = page.get_by_role("row").filter(has=page.locator(f"a[href$='/jobs/{job_id}/']"))
    expect(row.get_by_role("cell", name=re.compile(r"^\d+ users?$"))).to_be_visible()
