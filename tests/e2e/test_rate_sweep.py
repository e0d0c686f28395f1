"""An operator builds a Poisson request-rate sweep suite in the browser; a member queues it
on the simulated Spark and reads the goodput answer, the saturation and what the server
did (KV cache usage) per level."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login, pick_host

pytestmark = pytest.mark.e2e


NEMOTRON = "Nemotron-3-Super 120B — official vLLM Spark recipe"


def build_rate_suite(page, name: str, rates: str, requests: int, **fields) -> None:
    """An operator's Poisson rate-sweep suite, one short scenario, a generous SLO: at 40×
    simulated speed one wall millisecond is 40 simulated ones, and a busy machine's delays
    must not decide which rate "holds" (the saturated one misses it by minutes, as its
    backlog grows). `fields`: other inputs by id (a select takes its option value)."""
    login(page, "otto")
    page.goto("/benchmarks/suites/new/")
    page.locator("#id_name").fill(name)
    page.locator("#id_scenarios_text").fill("short: 200/16")
    page.locator("#id_repetitions").fill("1")
    page.locator("#id_sweep_mode").select_option("rate")
    page.locator("#id_rates_text").fill(rates)
    page.locator("#id_requests_per_level").fill(str(requests))
    page.locator("#id_arrival_kind").select_option("poisson")
    page.locator("#id_slo_ttft_s").fill("20")
    page.locator("#id_slo_tpot_s").fill("0.2")
    for field, value in fields.items():
        box = page.locator(f"#id_{field}")
        if box.evaluate("e => e.tagName") == "SELECT":
            box.select_option(value)
        else:
            box.fill(value)
    page.get_by_role("button", name="Save").click()


def queue_and_wait(member, suite: str, timeout_ms: int) -> None:
    """A member queues `suite` for the official Nemotron recipe on local-sim; it ends Done."""
    login(member, "mia")
    member.get_by_role("link", name="Benchmarks", exact=True).click()
    member.get_by_label("Suite").select_option(label=suite)
    member.get_by_label("Recipe").select_option(label=NEMOTRON)
    pick_host(member.get_by_label("Host"), "local-sim")
    member.get_by_role("button", name="Queue").click()
    badge = member.locator("[id$='-progress'] .state-badge")
    expect(badge).to_have_text("Done", timeout=timeout_ms)


def test_a_rate_sweep_suite_is_built_run_and_read_in_the_browser(new_page, idle_demo_host):
    page = new_page()
    build_rate_suite(page, "Team rate sweep", "0.1, 200", 60,
                     sweep_prompt_tokens="200", sweep_output_tokens="64")  # fmt: skip
    row = page.get_by_role("row").filter(has_text="Team rate sweep")
    expect(row).to_contain_text("200/64 at 0.1, 200 req/s (Poisson)")

    member = new_page()
    queue_and_wait(member, "Team rate sweep", 300_000)
    sweep = member.get_by_test_id("rate-sweep")
    expect(sweep.get_by_test_id("rate-answer")).to_contain_text(
        re.compile(r"^Holds 0\.1 requests/s of 200/64 with TTFT p95 ≤ 20 s")
    )
    expect(sweep.get_by_test_id("rate-answer")).to_contain_text("fell behind (saturated)")
    levels = sweep.get_by_test_id("rate-level")
    expect(levels).to_have_count(2)
    expect(levels.nth(1)).to_contain_text("saturated")
    # what the server did during each level: its KV cache usage and queue, from /metrics
    for i in range(2):
        expect(levels.nth(i).get_by_test_id("server-during-level")).to_contain_text(
            re.compile(r"KV \d+\.\d % peak")
        )
    expect(levels.nth(1).get_by_test_id("server-during-level")).to_contain_text("waiting")
    # latency against the requested rate, drawn in the browser
    expect(sweep.locator("[data-bench-data$='-rates'] canvas")).to_be_visible()
    expect(sweep).not_to_contain_text("Chart unavailable")


def test_a_sharegpt_poisson_sweep_is_built_run_and_read_in_the_browser(new_page, idle_demo_host):
    """The same with ShareGPT conversations as the requests (vllm bench serve's dataset):
    each level shows its mean lengths, the goodput answer names the dataset."""
    page = new_page()
    build_rate_suite(page, "ShareGPT rates", "0.05, 200", 40, sweep_dataset="sharegpt")
    expect(page.get_by_role("row").filter(has_text="ShareGPT rates")).to_contain_text(
        "ShareGPT at 0.05, 200 req/s (Poisson)"
    )

    member = new_page()
    queue_and_wait(member, "ShareGPT rates", 400_000)
    sweep = member.get_by_test_id("rate-sweep")
    expect(sweep.get_by_test_id("rate-answer")).to_contain_text(
        re.compile(r"^Holds 0\.05 requests/s of ShareGPT with TTFT p95 ≤ 20 s")
    )
    expect(sweep.get_by_test_id("dataset-note")).to_contain_text("ShareGPT conversation")
    levels = sweep.get_by_test_id("rate-level")
    expect(levels).to_have_count(2)
    expect(levels.nth(1)).to_contain_text("saturated")
    for i in range(2):
        expect(levels.nth(i).get_by_test_id("dataset-lengths")).to_contain_text(
            re.compile(r"mean \d+/\d+ tokens")
        )
        expect(levels.nth(i).get_by_test_id("server-during-level")).to_contain_text(
            re.compile(r"KV \d+\.\d % peak")
        )
