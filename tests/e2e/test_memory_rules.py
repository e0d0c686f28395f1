"""One set of memory rules, in a real browser (issue #16, point 2):

* a 0.90 recipe the wizard recommends, started on a simulated Spark watched by its host
  agent, raises no memory warning (the old 8 GiB warn line fired on every such run);
* a recipe the planner says does not fit cannot be started without the operator's typed
  override, which the run then records; the queue form says so before submitting.
"""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import host_processes, login, pick_host
from tests.isolation import PORT_SHIFT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]  # a real load on a busy machine

HOST_SETUP = """
from apps.hosts.models import Host
Host.objects.update_or_create(name="{name}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=50, port_min={port}, port_max={port_max},
    description="a stock simulated Spark (every memory field at its default)"))
"""
GUARD_WATCH = """
import time
from apps.hosts.models import Host
from apps.telemetry.models import Incident
deadline, seen = time.monotonic() + 60, []
while time.monotonic() < deadline and len(seen) < 12:
    host = Host.objects.get(name="{name}")
    sample = host.agent_sample or {{}}
    if sample.get("run") == {run} and (sample.get("mem_available") or 10**12) < 5 * 10**9:
        if not seen or seen[-1][0] != sample.get("t"):
            seen.append((sample.get("t"), sample.get("mem_level"), sample["mem_available"]))
    time.sleep(0.3)
print("LEVELS", ",".join(sorted({{level for _t, level, _a in seen}})) or "none")
print("AVAILABLE", min((a for _t, _l, a in seen), default=0), max((a for _t, _l, a in seen), default=0))
print("SAMPLES", len(seen))
print("WARN", host.watchdog_warn_gb, "INCIDENTS", Incident.objects.filter(host=host).count())
"""
BIG_RECIPE = """
from decimal import Decimal
from apps.recipes.models import Recipe
Recipe.objects.update_or_create(slug="llama-70b-bf16-long-team", defaults=dict(
    name="Llama 70B BF16 long team", model_id="meta-llama/Llama-3.3-70B-Instruct",
    total_params_b=70.6, weight_format="bf16", num_layers=80, kv_heads=8, head_dim=128,
    gpu_memory_utilization=Decimal("0.85"), max_model_len=131072, max_num_seqs=32))
"""
OVERRIDE = """
from apps.runs.models import Run
run = Run.objects.get(pk={pk})
print(run.fit_override_by.username, run.fit_verdict, run.state)
"""


@pytest.fixture
def stock_host(live_server_asgi):
    """A simulated Spark with its own worker and host agent (the guard)."""

    name = f"stock-{uuid.uuid4().hex[:4]}"
    live_server_asgi.manage("shell", "-c", HOST_SETUP.format(name=name, port=21700 + PORT_SHIFT,
                                                             port_max=21799 + PORT_SHIFT))  # fmt: skip
    with host_processes(live_server_asgi, name, "--memory-interval", "0.25"):
        try:
            yield name
        finally:
            live_server_asgi.manage("shell", "-c", (
                "from apps.runs.models import Run\nfrom apps.runs import runner\n"
                f"for run in Run.objects.active().filter(host__name='{name}'):\n"
                "    runner.stop(run.pk)\n"
            ))  # fmt: skip


def test_a_recipe_the_wizard_recommends_raises_no_warning_on_its_host(
    new_page, live_server_asgi, stock_host
):
    live = new_page()
    login(live, "otto")
    # The wizard: the 35B preset and the decision table's single-user workload → 0.90.
    live.get_by_role("link", name="Recipes", exact=True).click()
    live.get_by_role("link", name="Plan a recipe (wizard)").click()
    live.get_by_role("button", name=re.compile(r"^Qwen3\.5-35B-A3B")).click()
    live.get_by_role("button", name="Next →").click()
    live.get_by_role("button", name="35B MoE, single user, long context").click()
    expect(live.get_by_label("GPU memory utilization")).to_have_value("0.90")
    preview = live.locator("#plan-preview")
    expect(preview.locator(".verdict")).to_have_text("Fits")
    expect(preview).to_contain_text("4.4 GB")  # the headroom the guard now leaves alone
    live.get_by_role("button", name="Next →").click()
    live.get_by_label("Name").fill("Wizard 35B at 0.90")
    live.get_by_role("button", name="Save recipe").click()
    expect(live.get_by_role("heading", name="Wizard 35B at 0.90")).to_be_visible()

    # Started from its page on the stock simulated host, watched to ready.
    start = live.locator("#start-form")
    pick_host(start.get_by_label("Host"), stock_host)
    start.get_by_role("button", name="Start").click()
    expect(live.get_by_role("heading", name=re.compile(r"^Run \d+: Wizard 35B"))).to_be_visible()
    run_id = re.search(r"/runs/(\d+)/", live.url).group(1)
    expect(live.locator(".run-progress .state-badge")).to_have_text("Ready", timeout=120_000)

    # The guard watches the ready run's memory for a dozen polls: 4.39 GB free, level ok
    # (the old 8 GiB line warned on the second one).
    out = live_server_asgi.manage("shell", "-c", GUARD_WATCH.format(name=stock_host, run=run_id))
    report = dict(line.split(" ", 1) for line in out.splitlines() if line[:1].isupper())
    assert report["SAMPLES"] == "12", out
    assert report["LEVELS"] == "ok", out
    low, high = (int(v) for v in report["AVAILABLE"].split())
    assert 4.3e9 < low <= high < 4.5e9, out
    assert report["WARN"] == "4.0 INCIDENTS 0", out
    member = new_page()
    login(member, "mia")
    for page in (live, member):
        page.goto(f"/runs/{run_id}/")
        expect(page.locator(".run-progress .state-badge")).to_have_text("Ready")
        expect(page.locator("body")).not_to_contain_text("warn threshold")
        expect(page.locator(f"#banner-{stock_host}")).to_have_count(0)


def test_a_recipe_that_does_not_fit_needs_the_typed_override(new_page, live_server_asgi):
    live_server_asgi.manage("shell", "-c", BIG_RECIPE)
    host = f"nofit-{uuid.uuid4().hex[:4]}"  # no worker: an admitted run just waits queued
    live_server_asgi.manage("shell", "-c", HOST_SETUP.format(name=host, port=21800 + PORT_SHIFT,
                                                             port_max=21899 + PORT_SHIFT))  # fmt: skip

    # A member asks the queue form first: refused before submitting, with the reason.
    member = new_page()
    login(member, "mia")
    member.goto("/benchmarks/")
    form = member.locator("#queue-form")
    form.get_by_label("Recipe").select_option(label="Llama 70B BF16 long team")
    pick_host(form.get_by_label("Host"), host)
    hint = member.locator("#queue-hint-text")
    expect(hint).to_contain_text("Would be refused: The planner says “Llama 70B BF16 long team”")
    expect(hint).to_contain_text("A benchmark job never overrides the planner")
    expect(member.locator("#queue-host-states")).to_contain_text(f"{host}: idle")

    operator = new_page()
    login(operator, "otto")
    operator.get_by_role("link", name="Runs", exact=True).click()
    start = operator.locator("#start-form")

    def choose():
        start.get_by_label("Recipe").select_option(label="Llama 70B BF16 long team (util 0.85)")
        pick_host(start.get_by_label("Host"), host)

    choose()
    start.get_by_role("button", name="Start").click()
    error = operator.locator("#messages .msg-error")  # the form's answer (not a failed run's row)
    expect(error).to_contain_text("Not started: The planner says “Llama 70B BF16 long team” does")
    expect(error).to_contain_text("do not fit in vLLM's pool")
    expect(error).to_contain_text("typing the recipe's name")

    choose()
    start.get_by_text("The planner says it does not fit?").click()
    start.get_by_label("Type its exact name to override").fill("llama 70b")
    start.get_by_role("button", name="Start").click()
    expect(operator.locator("#messages .msg-error")).to_contain_text("must be the recipe's name")
    expect(operator).to_have_url(re.compile(r"/runs/$"))

    choose()
    start.get_by_text("The planner says it does not fit?").click()
    start.get_by_label("Type its exact name to override").fill("Llama 70B BF16 long team")
    start.get_by_role("button", name="Start").click()
    expect(operator.get_by_role("heading", name=re.compile(r"^Run \d+: Llama 70B"))).to_be_visible()
    expect(operator.locator("#fit-override")).to_contain_text("overridden by otto")
    run_id = re.search(r"/runs/(\d+)/", operator.url).group(1)
    out = (
        live_server_asgi.manage("shell", "-c", OVERRIDE.format(pk=run_id)).splitlines()[-1].split()
    )
    assert out[0] == "otto" and " ".join(out[1:4]) == "does not fit"
    # Everyone sees who overrode.
    member.goto(f"/runs/{run_id}/")
    expect(member.locator("#fit-override")).to_contain_text("overridden by otto")
    live_server_asgi.manage("shell", "-c", (
        "from apps.runs.models import Run\n"
        f"Run.objects.filter(pk={run_id}).update(state='failed')\n"
    ))  # fmt: skip
