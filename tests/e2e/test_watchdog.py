"""A leaking model on a simulated Spark: the host agent's live charts show memory falling,
the watchdog kills the run before the freeze line, and every open page gets the banner."""

import re
import subprocess
import sys

import pytest
from playwright.sync_api import expect

from tests.conftest import ROOT, stop_process, wait_for
from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

SETUP = """
from apps.hosts.models import Host
Host.objects.update_or_create(name="leaky-sim", defaults=dict(
    engine="process", simulated=True, sim_time_scale=50, sim_faults="mem-growth:1.2",
    port_min=21500, port_max=21599, description="a simulated Spark with a memory leak"))
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
    from sparkpanel.celery import app

    live_server_asgi.manage("shell", "-c", SETUP)
    logs = live_server_asgi.log.parent
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "sparkpanel", "worker", "-Q", "host.leaky-sim",
         "-n", "leaky-sim@e2e", "-c", "1", "--prefetch-multiplier", "1", "--without-mingle",
         "--without-gossip"],
        cwd=ROOT, env=live_server_asgi.env, stdout=(logs / "leaky-worker.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    agent = subprocess.Popen(
        [sys.executable, "manage.py", "hostagent", "--host", "leaky-sim", "--memory-interval", "0.25"],
        cwd=ROOT, env=live_server_asgi.env, stdout=(logs / "leaky-agent.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for(lambda: bool(app.control.ping(destination=["leaky-sim@e2e"], timeout=0.5)), 60,
                 "the leaky host's worker", worker)  # fmt: skip
        yield live_server_asgi
    finally:
        stop_process(agent, timeout=10)
        stop_process(worker, timeout=20)


def test_the_watchdog_banner_reaches_a_member_watching_the_dashboard(new_page, leaky_host):
    page = new_page()
    login(page, "mia")
    panel = page.locator("section", has=page.get_by_role("heading", name=re.compile("^leaky-sim")))
    state = panel.locator("[data-telemetry-state]")
    expect(state).to_have_text(re.compile("^live"), timeout=15_000)  # the agent's samples arrive
    expect(panel.locator("[data-telemetry-chart='memory'] canvas").first).to_be_visible()

    run_id = leaky_host.manage("shell", "-c", START).strip().splitlines()[-1]
    banner = page.locator("#banner-leaky-sim")
    expect(banner).to_contain_text("act threshold", timeout=90_000)
    expect(banner).to_contain_text(f"Killed run {run_id}")
    # The run page says why it failed, and the host page lists the incident.
    page.goto(f"{leaky_host.url}/runs/{run_id}/")
    expect(page.locator(".run-progress")).to_contain_text("stopped by the memory watchdog")
    page.goto(f"{leaky_host.url}/hosts/")
    expect(page.locator("#incidents-leaky-sim")).to_contain_text("Run stopped by the watchdog")
