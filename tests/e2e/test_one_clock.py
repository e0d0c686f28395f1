"""One clock (issue #16): on a 10× simulated Spark the chat, the dashboard's live chart and
a benchmark show the same tokens per second — the simulated Spark's, below the decode
ceiling the panel prints for the recipe — and each says it is simulated time.

Before, the chat timed answers on the wall clock (ten times the benchmark's figure, three
times the ceiling) and the dashboard's tokens/s chart divided tokens by wall seconds."""

import re
import statistics

import pytest
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.e2e.conftest import host_processes, login, pick_host
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

HOST = "clock-sim"
SLUG = "qwen3-5-35b-max-single-user"
SUITE = "one clock"
# The 10× host, one small suite — a single stream long enough that the agent's 1 s scrapes
# see whole seconds of decoding (2,048 tokens at ~48 simulated tok/s ≈ 4 wall seconds at
# 10×) — and a start of the recipe there (it loads while the browser logs in).
SETUP = f"""
from apps.benchmarks.models import Suite
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
from apps.runs.services import run_start
host, _ = Host.objects.update_or_create(name="{HOST}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=10, port_min={21600 + PORT_SHIFT}, port_max={21699 + PORT_SHIFT},
    description="a simulated Spark at 10x"))
Suite.objects.update_or_create(name="{SUITE}", defaults=dict(
    scenarios=[{{"name": "long decode", "prompt_tokens": 128, "output_tokens": 2048}}],
    repetitions=1, warmup_requests=0, sweep_enabled=False))
run = Run.objects.active().filter(host=host).first()
if run is None:
    run = run_start(recipe=Recipe.objects.get(slug="{SLUG}"), host=host, user=None)
print(run.pk)
"""
STOP = f"""
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="{HOST}"):
    run_stop(run=run)
"""
# Collects the dashboard's live samples for the host (the charts draw these).
COLLECT = f"""
window.__tps = [];
document.addEventListener("telemetry:sample", (e) => {{
  const s = e.detail || {{}};
  if (s.host === "{HOST}" && s.generation_tps != null) window.__tps.push(s.generation_tps);
}});
"""


@pytest.fixture
def clock_host(live_server_asgi):
    # The start waits on the host's queue for the worker that boots next.
    run_id = live_server_asgi.manage("shell", "-c", SETUP).strip().splitlines()[-1]
    with host_processes(live_server_asgi, HOST):
        try:
            yield live_server_asgi, run_id
        finally:
            live_server_asgi.manage("shell", "-c", STOP)


def _number(text: str) -> float:
    match = re.search(r"\d[\d,]*(?:\.\d+)?", text)
    assert match, f"no number in {text!r}"
    return float(match.group().replace(",", ""))


def test_chat_dashboard_and_benchmark_show_the_same_simulated_tokens_per_second(
    new_page, clock_host
):
    _server, run_id = clock_host
    label = "simulated ×10"

    # The decode ceiling the panel prints for the recipe on a Spark.
    page = new_page()
    login(page, "mia")
    page.goto(f"/recipes/{SLUG}/")
    ceiling = _number(page.locator(".ceiling").first.inner_text())

    # The dashboard, open throughout, records the live samples its charts draw.
    dash = new_page()
    dash.add_init_script(COLLECT)
    login(dash, "mia")
    panel = dash.locator("section", has=dash.get_by_role("heading", name=re.compile(f"^{HOST}")))
    expect(panel.locator("[data-telemetry-state]")).to_have_text(
        re.compile("^live"), timeout=20_000
    )
    expect(panel.locator(".tele-clock")).to_have_text(label)

    # The model loads meanwhile; its run page says when it is ready.
    page.goto(f"/runs/{run_id}/")
    expect(page.locator(".run-progress")).to_have_attribute("data-state", "ready", timeout=120_000)
    # Its phase table and its log agree: both in the simulated Spark's time.
    page.reload()
    loading = page.locator("xpath=//dt[normalize-space()='loading']/following-sibling::dd[1]")
    expect(loading).to_contain_text(label)
    log_text = page.locator(f"#run-{run_id}-log").inner_text()
    logged = float(re.search(r"Loading weights took ([\d.]+) seconds", log_text).group(1))
    shown = _number(loading.inner_text())
    assert logged <= shown <= 1.35 * logged, f"log {logged} s, phase table {shown} s"

    # A chat answer of about a thousand tokens (two wall seconds: a busy machine's relay
    # hiccup cannot pass for speed).
    page.goto("/chat/")
    page.get_by_label("Ready model").select_option(value=str(run_id))
    page.get_by_role("button", name="New chat").click()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)
    page.get_by_label("Message").fill("/sparksim echo " + " ".join(f"w{i}" for i in range(1000)))
    page.get_by_role("button", name="Send").click()
    stats = page.locator(".chat-assistant").last.locator("[data-stats]")
    expect(stats).to_contain_text("finish:", timeout=30_000)
    expect(stats).to_contain_text(label)
    chat_tps = _number(re.search(r"([\d.]+) tok/s", stats.inner_text()).group(1))
    page.reload()  # the saved answer says the same
    saved = page.locator(".chat-assistant").last.locator("[data-stats]")
    expect(saved).to_contain_text(f"{chat_tps:.1f} tok/s")
    expect(saved).to_contain_text(label)

    # One small benchmark on the same run.
    page.goto("/benchmarks/")
    page.get_by_label("Suite").select_option(label=SUITE)
    recipe = page.get_by_label("Recipe").locator("option", has_text="max single-user")
    page.get_by_label("Recipe").select_option(recipe.first.get_attribute("value"))
    pick_host(page.get_by_label("Host"), HOST)
    page.get_by_role("button", name="Queue").click()
    page.wait_for_url(re.compile(r"/benchmarks/jobs/\d+/$"))
    job_id = re.search(r"/jobs/(\d+)/", page.url).group(1)
    expect(page.locator("[id$='-progress'] .state-badge")).to_have_text("Done", timeout=90_000)
    results = page.locator(f"#job-{job_id}-results")
    expect(results.get_by_role("heading", name=re.compile("^Single stream"))).to_contain_text(label)
    table = results.locator("table").first
    headers = [h.strip().lower() for h in table.locator("thead th").all_text_contents()]
    column = next(i for i, h in enumerate(headers) if h.startswith("decode tok/s"))
    bench_tps = _number(table.locator("tbody tr").first.locator("td").nth(column).inner_text())

    # The dashboard saw that benchmark decode: the 1 s intervals inside it give the
    # stream's rate (the median of those near the top: an interval that only partly
    # overlaps a stream reads lower, a late scrape reads higher once).
    wait_for(lambda: len(dash.evaluate("window.__tps")) > 3, 15, "dashboard samples")
    seen = dash.evaluate("window.__tps")
    dash_tps = statistics.median([v for v in seen if v >= 0.5 * max(seen)])

    figures = {"chat": chat_tps, "dashboard": dash_tps, "benchmark": bench_tps}
    print("one clock:", figures, "ceiling", ceiling, "dashboard samples", seen)
    for name, value in figures.items():
        assert 0 < value < ceiling, f"{name} shows {value} tok/s; the ceiling is {ceiling}"
    low, high = min(figures.values()), max(figures.values())
    assert high <= 1.35 * low, f"three clocks: {figures}"
