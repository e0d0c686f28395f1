"""An operator starts the demo recipe on the simulated Spark; a member watches it load,
warm up and become ready, live, without reloading."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login, pick_host

pytestmark = pytest.mark.e2e


def test_operator_starts_a_run_and_a_member_watches_it_become_ready(new_page, idle_demo_host):
    operator = new_page()
    login(operator, "otto")
    operator.get_by_role("link", name="Runs", exact=True).click()
    start = operator.locator("#start-form")
    start.get_by_label("Recipe").select_option(
        label="Qwen3.5-35B-A3B — max single-user throughput (util 0.90)"
    )
    pick_host(start.get_by_label("Host"), "local-sim")
    start.get_by_role("button", name="Start").click()
    expect(
        operator.get_by_role("heading", name=re.compile(r"^Run \d+: Qwen3\.5-35B-A3B"))
    ).to_be_visible()
    run_url = operator.url
    banner = operator.locator(".msg-success", has_text="Starting “Qwen3.5-35B-A3B")
    expect(banner).to_be_visible()  # while it starts; gone once it is ready (below)

    member = new_page()
    login(member, "mia")
    member.goto(run_url)
    badge = member.locator(".run-progress .state-badge")
    expect(member.locator(".run-progress")).to_be_visible()
    # Pushed over /ws/events/ while the page stays put: loading, then ready.
    expect(badge).to_have_text("Ready", timeout=90_000)
    expect(operator.locator(".run-progress .state-badge")).to_have_text("Ready")
    expect(banner).to_have_count(0)  # "Starting …" is over at Ready (issue 43)
    expect(member.locator(".log")).to_contain_text("Application startup complete.")
    # The facts panel followed too: KV cache size and the warm-up's cold and warm TTFT.
    expect(member.locator("[id$='-details']")).to_contain_text("first request")
    expect(member.locator("[id$='-details']")).to_contain_text("loading")
    # How many users, told once: vLLM's measured KV capacity from this start (live, no
    # reload) beside --max-num-seqs 1. (Which bound binds also depends on the benchmarks
    # other tests of this session ran on the recipe: tests/benchmarks/test_capacity_story.py.)
    capacity = member.locator("#run-capacity")
    expect(capacity.locator("tr[data-bound=memory]")).to_contain_text(
        "as vLLM measured at a ready start, this run"
    )
    expect(capacity.locator("tr[data-bound=scheduler]")).to_contain_text("--max-num-seqs 1:")
    expect(member.get_by_role("button", name="Stop")).to_have_count(0)  # members cannot stop runs

    operator.get_by_role("button", name="Stop").click()
    # Stop asks first (tests/e2e/test_team_ops.py checks what it says).
    operator.get_by_role("button", name=re.compile(r"^Yes, stop run \d+$")).click()
    expect(operator.locator(".run-progress .state-badge")).to_have_text("Stopped", timeout=30_000)
    expect(badge).to_have_text("Stopped", timeout=30_000)
