"""A leaking model on a simulated Spark: the host agent's live charts show memory falling
and the watchdog's forecast, the watchdog kills the run before the freeze line, and every
open page gets the banner."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

SETUP = f"""
from apps.hosts.models import Host
Host.objects.update_or_create(name="leaky-sim", defaults=dict(
    engine="process", simulated=True, sim_time_scale=50, sim_faults="mem-growth:1.2",
    port_min={21500 + PORT_SHIFT}, port_max={21599 + PORT_SHIFT}, description="a simulated Spark with a memory leak"))
"""
START = """
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.services import run_start
recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
recipe.gpu_memory_utilization = "0.85"
recipe.save()
print(run_start(recipe=recipe, host=Host.objects.get(name="leaky-sim"), user=None).pk)
"""


@pytest.fixture
def leaky_host(live_server_asgi):

    live_server_asgi.manage("shell", "-c", SETUP)
    with host_processes(live_server_asgi, "leaky-sim", "--memory-interval", "0.25"):
        yield live_server_asgi


def test_the_watchdog_banner_reaches_a_member_watching_the_dashboard(new_page, leaky_host):
    page = new_page()
    login(page, "mia")
    panel = page.locator("section", has=page.get_by_role("heading", name=re.compile("^leaky-sim")))
    state = panel.locator("[data-telemetry-state]")
    expect(state).to_have_text(re.compile("^live"), timeout=15_000)  # the agent's samples arrive
    expect(panel.locator("[data-telemetry-chart='memory'] canvas").first).to_be_visible()

    run_id = leaky_host.manage("shell", "-c", START).strip().splitlines()[-1]
    # The watchdog's forecast, live: the fall and the time to the act line, and its line
    # on the memory chart.
    expect(state).to_contain_text(re.compile(r"memory falling \d+\.\d\d GB/s: the act line in"),
                                  timeout=90_000)  # fmt: skip
    expect(panel.locator("[data-telemetry-chart='memory']")).to_contain_text("at this trend")
    banner = page.locator("#banner-leaky-sim")
    expect(banner).to_contain_text("act threshold", timeout=90_000)
    expect(banner).to_contain_text(f"Killed run {run_id}")
    # The run page says why it failed, and the host page lists the incident.
    page.goto(f"{leaky_host.url}/runs/{run_id}/")
    expect(page.locator(".run-progress")).to_contain_text("stopped by the memory watchdog")
    page.goto(f"{leaky_host.url}/hosts/")
    expect(page.locator("#incidents-leaky-sim")).to_contain_text("Run stopped by the watchdog")
