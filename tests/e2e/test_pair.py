"""An operator starts a tensor-parallel-2 recipe on a pair of simulated Sparks in Chromium,
watches both halves come up on the run page, chats with it, and stops it: two hosts with
their own real Celery workers and host agents, a real two-node Ray cluster started by
those workers (apps/runs/pair.py), sparksim playing vLLM's Ray executor."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import free_port, wait_for
from tests.e2e.conftest import host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

SETUP = """
from apps.hosts.models import Host, SparkPair
from apps.recipes.models import Recipe
hosts = []
for i, name in enumerate(["pair-a", "pair-b"]):
    host, _ = Host.objects.update_or_create(name=name, defaults=dict(
        engine="process", simulated=True, sim_time_scale=40,
        port_min={low} + 100 * i, port_max={low} + 99 + 100 * i))
    hosts.append(host)
SparkPair.objects.update_or_create(name="pair-ab", defaults=dict(
    head=hosts[0], worker=hosts[1], head_link_address="127.0.0.2",
    worker_link_address="127.0.0.3", ray_port={ray_port}))
base = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
base.pk, base.slug, base.name = None, "qwen-pair", "Qwen on a pair"
base.tensor_parallel_size = 2
if not Recipe.objects.filter(slug="qwen-pair").exists():
    base.save()
"""
LEFT = """
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
print(sum(len(engine_for(h).list_managed()) for h in Host.objects.filter(name__in=["pair-a", "pair-b"])))
"""


def _choose(select, text: str) -> None:
    """Select the option whose label contains `text`."""
    select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))


def test_operator_starts_a_tp2_recipe_on_a_pair_watches_both_halves_chats_and_stops_it(
    new_page, live_server_asgi
):
    server = live_server_asgi
    server.manage("shell", "-c", SETUP.format(ray_port=free_port(), low=23000 + PORT_SHIFT))
    with host_processes(server, "pair-a"), host_processes(server, "pair-b"):
        page = new_page()
        login(page, "otto")
        page.get_by_role("link", name="Runs", exact=True).click()
        start = page.locator("#start-form")
        _choose(start.get_by_label("Recipe"), "Qwen on a pair")
        _choose(start.get_by_label("Host"), "pair-a")
        start.get_by_role("button", name="Start").click()
        expect(page.get_by_role("heading", name=re.compile(r"^Run \d+: Qwen on a pair on pair-a"))
               ).to_be_visible()  # fmt: skip
        run_url = page.url

        # Both halves: the pair line names the worker Spark and its step; the worker
        # Spark's memory has its own chart beside the head's.
        pair_line = page.get_by_test_id("run-pair")
        expect(pair_line).to_contain_text("pair-b", timeout=30_000)
        expect(page.locator(".run-progress .state-badge")).to_have_text("Ready", timeout=150_000)
        page.reload()
        expect(page.get_by_test_id("run-pair")).to_contain_text("tensor parallel 2 over two Sparks")
        expect(page.get_by_test_id("peer-memory")).to_contain_text("pair-b (the pair's worker)")
        expect(page.locator(".log")).to_contain_text("(RayWorkerProc pid=")
        expect(page.locator(".log")).to_contain_text("ip=127.0.0.3)")

        # Chat with it: the pair's model answers like any ready run.
        page.get_by_role("link", name="Chat", exact=True).click()
        _choose(page.locator("select[name=run]"), "Qwen on a pair on pair-a")
        page.get_by_role("button", name="New chat").click()
        expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)
        page.get_by_label("Message").fill("/sparksim echo hello from two Sparks")
        page.get_by_role("button", name="Send").click()
        answer = page.locator(".chat-assistant").last
        expect(answer.locator("[data-content]")).to_have_text(
            "hello from two Sparks", timeout=30_000
        )

        # Stop it: both halves go.
        page.goto(run_url)
        page.get_by_role("button", name="Stop").click()
        page.get_by_role("button", name=re.compile(r"^Yes, stop run \d+$")).click()
        expect(page.locator(".run-progress .state-badge")).to_have_text("Stopped", timeout=60_000)
        wait_for(lambda: server.manage("shell", "-c", LEFT).split()[-1] == "0", 60,
                 "nothing left on either Spark")  # fmt: skip
