"""The run page's live charts during a model load, in a real browser, with a real host
agent process and a real simulated Spark: samples arrive while the model loads (memory
matters most then), the x axis is the last minutes ending now, no "stale" while the agent
runs, legends show the latest values, the KV cache axis is 0–100 %, the back-fill is
fetched again when a socket (re)opens, and a ready run says "ready after X", which stays."""

import re
import time

import pytest
from playwright.sync_api import expect

from tests.conftest import stop_process
from tests.e2e.conftest import host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

HOST = "tele-sim"
SETUP = f"""
from apps.hosts.models import Host
Host.objects.update_or_create(name="{HOST}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=40, sim_faults="slow-start:4",
    port_min={21600 + PORT_SHIFT}, port_max={21699 + PORT_SHIFT}, description="a simulated Spark that loads slowly"))
"""
START = f"""
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.services import run_start
recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
print(run_start(recipe=recipe, host=Host.objects.get(name="{HOST}"), user=None).pk)
"""
STOP = f"""
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="{HOST}"):
    run_stop(run=run)
"""
LOADING = ("queued", "pulling", "starting", "loading", "compiling")
# Every socket sample the page receives, with the page's clock (installed before load).
RECORD = """
window.__samples = [];
document.addEventListener("telemetry:sample", (e) => window.__samples.push(
  {t: e.detail.t, run: e.detail.run, run_state: e.detail.run_state, at: Date.now() / 1000}));
window.__backfills = 0;
document.addEventListener("telemetry:backfill", () => window.__backfills++);
"""
CHART = """([name]) => {
  const panel = document.querySelector("[data-telemetry]")._panel;
  const chart = panel.charts.find((c) => c.root.parentElement.dataset.telemetryChart === name);
  return {xmin: chart.scales.x.min, xmax: chart.scales.x.max, ymin: chart.scales.y.min,
          ymax: chart.scales.y.max, points: chart.data[0].length, now: Date.now() / 1000,
          labels: chart.axes[0]._values || [], width: chart.bbox.width / devicePixelRatio,
          legend: Array.from(chart.root.querySelectorAll(".u-legend .u-series .u-value"))
                       .map((el) => el.textContent)};
}"""


@pytest.fixture
def slow_host(live_server_asgi):
    live_server_asgi.manage("shell", "-c", SETUP)
    with host_processes(live_server_asgi, HOST) as procs:
        live_server_asgi.agent = procs["agent"]
        try:
            yield live_server_asgi
        finally:
            live_server_asgi.manage("shell", "-c", STOP)


def test_the_run_page_charts_move_during_a_load_and_a_ready_run_stops_counting(new_page, slow_host):
    page = new_page()
    login(page, "mia")
    page.add_init_script(RECORD)
    run_id = slow_host.manage("shell", "-c", START).strip().splitlines()[-1]
    page.goto(f"/runs/{run_id}/")
    progress = page.locator(f"#run-{run_id}-progress")
    state = page.locator("[data-telemetry-state]")

    # Samples reach the run's page while the model is still loading (not only once ready).
    page.wait_for_function(
        # A function, not an expression: an expression is eval()ed, which the pages'
        # Content-Security-Policy (no 'unsafe-eval') refuses.
        f"() => window.__samples.filter((s) => {list(LOADING)}.includes(s.run_state)).length >= 2",
        timeout=60_000,
    )
    loading = page.evaluate("window.__samples")
    # Each says which run it is about and the phase the run was in when it was taken.
    assert all(s["run"] == int(run_id) for s in loading), loading
    seen = []
    for _ in range(6):  # the agent runs: never "stale" (its samples come each second)
        seen.append(state.text_content())
        page.wait_for_timeout(500)
    assert all(text.startswith("live") for text in seen), seen
    assert not any("stale" in text for text in seen), seen

    # The x axis is the window ending now: a few minutes, not a single point's autoscale.
    memory = page.evaluate(CHART, ["memory"])
    assert memory["points"] >= 2
    assert abs(memory["xmax"] - memory["now"]) < 5, memory
    assert 60 <= memory["xmax"] - memory["xmin"] <= 15 * 60 + 5, memory
    # Time labels that fit: one per 80 px at most, all different.
    labels = memory["labels"]
    assert labels and len(labels) <= memory["width"] / 70 + 1, memory
    assert len(set(labels)) == len(labels), labels
    assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", label) for label in labels), labels
    # Legends show the latest values without hovering (not "--").
    used, available = memory["legend"][1:3]
    assert re.fullmatch(r"\d+(\.\d+)?k?", used) and re.fullmatch(r"\d+(\.\d+)?k?", available), (
        memory
    )
    assert not any(v == "--" for v in memory["legend"]), memory
    kv = page.evaluate(CHART, ["kv"])
    assert (kv["ymin"], kv["ymax"]) == (0, 100), kv

    # A socket that (re)opens makes the charts fetch the back-fill again.
    before = page.evaluate("window.__backfills")
    with page.expect_response(re.compile(rf"/telemetry/run/{run_id}/backfill\.json$")) as resp:
        page.evaluate("document.dispatchEvent(new CustomEvent('sparkpanel:socket-open'))")
    assert resp.value.status == 200
    page.wait_for_function(f"() => window.__backfills > {before}")

    # Ready: "ready after X" (how long the load took), and it does not count on.
    expect(progress).to_have_attribute("data-state", "ready", timeout=150_000)
    ready_after = progress.locator(".ready-after")
    expect(ready_after).to_have_text(re.compile(r"^ready after (\d+ s|\d+:\d\d|\d+ h \d\d min)$"))
    first = ready_after.text_content()
    time.sleep(2.5)
    page.reload()
    expect(page.locator(f"#run-{run_id}-progress .ready-after")).to_have_text(first)
    expect(page.locator(f"#run-{run_id}-progress")).not_to_contain_text("elapsed")
    # After the reload the charts show the load's history and the live samples go on.
    expect(page.locator("[data-telemetry-state]")).to_have_text(re.compile("^live"), timeout=15_000)
    after = page.evaluate(CHART, ["memory"])
    assert after["points"] >= 2 and abs(after["xmax"] - after["now"]) < 5, after
    tokens = page.evaluate(CHART, ["tokens"])
    assert tokens["ymin"] == 0 and tokens["ymax"] > 0, tokens

    # Only an agent that really is silent is called stale.
    stop_process(slow_host.agent, timeout=10)
    expect(page.locator("[data-telemetry-state]")).to_have_text(
        re.compile(r"^stale: no sample for \d+ s"), timeout=40_000
    )
