"""Side by side in Chromium: one prompt to two ready runs of different recipes (the demo
host's and a second simulated Spark's), both answers streaming at once in their columns
with their own figures; the user marks the better one and the arena counts it."""

import pytest
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.e2e.conftest import READY_RUN, STATE, host_processes, login
from tests.isolation import PORT_SHIFT

pytestmark = pytest.mark.e2e

HOST = "compare-sim"
# A second recipe (a copy of the Qwen preset under another name) started on a second
# simulated Spark: the pair the arena counts.
SETUP = f"""
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
from apps.runs.services import run_start
host, _ = Host.objects.update_or_create(name="{HOST}", defaults=dict(
    engine="process", simulated=True, sim_time_scale=40, port_min={21800 + PORT_SHIFT},
    port_max={21899 + PORT_SHIFT}, description="a second simulated Spark"))
recipe = Recipe.objects.filter(slug="qwen-compare-b").first()
if recipe is None:
    recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
    recipe.pk = None
    recipe.id = None
    recipe.name, recipe.slug = "Qwen compare B", "qwen-compare-b"
    recipe.save()
run = Run.objects.active().filter(host=host).first()
if run is None:
    run = run_start(recipe=recipe, host=host, user=None)
print(run.pk)
"""
STOP = f"""
from apps.runs.models import Run
from apps.runs.services import run_stop
for run in Run.objects.active().filter(host__name="{HOST}"):
    run_stop(run=run)
"""
VOTE = """
from apps.chat.models import ArenaVote
from apps.runs.models import Run
v = ArenaVote.objects.get()
print(v.turn, v.winner_column, v.recipes == [Run.objects.get(pk={a}).recipe_id, Run.objects.get(pk={b}).recipe_id])
"""
# When each answer element appeared and when it stopped streaming (performance.now()).
TIMES = """
window.__times = [];
new MutationObserver((records) => {
  for (const r of records) {
    for (const n of r.addedNodes) {
      if (n.nodeType === 1 && n.classList.contains('chat-assistant'))
        window.__times.push({col: n.closest('.compare-col').dataset.column, el: n, start: performance.now(), end: null});
    }
    if (r.type === 'attributes' && r.target.classList.contains('chat-assistant') &&
        !r.target.classList.contains('status-streaming')) {
      const t = window.__times.find((x) => x.el === r.target);
      if (t && t.end === null) t.end = performance.now();
    }
  }
}).observe(document.getElementById('compare'), {childList: true, subtree: true, attributes: true, attributeFilter: ['class']});
"""


@pytest.fixture
def two_runs(live_server_asgi, demo_worker):
    server = live_server_asgi
    a = server.manage("shell", "-c", READY_RUN).strip().splitlines()[-1]
    b = server.manage("shell", "-c", SETUP).strip().splitlines()[-1]
    with host_processes(server, HOST):
        try:
            for pk in (a, b):
                wait_for(lambda pk=pk: server.manage("shell", "-c", STATE.format(pk=pk)).split()[-1] == "ready",
                         120, f"run {pk} ready")  # fmt: skip
            yield server, a, b
        finally:
            server.manage("shell", "-c", STOP)


def test_one_prompt_streams_in_two_columns_at_once_and_the_vote_is_counted(new_page, two_runs):
    server, a, b = two_runs
    page = new_page()
    login(page, "mia")
    page.goto("/chat/")
    form = page.locator("#compare-form")
    form.locator(f"input[value='{a}']").check()
    form.locator(f"input[value='{b}']").check()
    form.get_by_role("button", name="Compare").click()
    page.wait_for_url("**/chat/compare/*/")
    expect(page.locator(".compare-col")).to_have_count(2)
    expect(page.locator(".compare-col h2", has_text="Qwen compare B")).to_have_count(1)
    # The columns follow the page's list of ready runs: find the copy's letter.
    letter = page.locator(".compare-col", has_text="Qwen compare B").get_attribute("data-column")
    col_b = 1 if letter == "B" else 0
    expect(page.locator("#compare-send [data-chat-state]")).to_have_text("ready", timeout=15_000)
    vote_b = page.get_by_role("button", name=f"{letter} is better")
    expect(vote_b).to_be_disabled()  # nothing to vote on yet

    page.evaluate(TIMES)
    text = " ".join(f"token{i}" for i in range(200))
    page.get_by_label("Message").fill("/sparksim echo " + text)
    page.get_by_role("button", name="Send to all").click()
    for column in ("A", "B"):
        col = page.locator(f".compare-col[data-column='{column}']")
        stats = col.locator(".chat-assistant [data-stats]")
        expect(stats).to_contain_text("finish:", timeout=30_000)
        expect(stats).to_contain_text("TTFT")
        expect(stats).to_contain_text("tok/s")
        expect(stats).to_contain_text("completion tokens")
        expect(col.locator(".chat-assistant [data-rendered]")).to_contain_text("token199")
    times = page.evaluate("window.__times.map(t => ({col: t.col, start: t.start, end: t.end}))")
    by_col = {t["col"]: t for t in times}
    assert set(by_col) == {"A", "B"}
    # In parallel: each column started before the other one finished.
    assert by_col["A"]["start"] < by_col["B"]["end"] and by_col["B"]["start"] < by_col["A"]["end"]

    expect(vote_b).to_be_enabled()
    vote_b.click()
    expect(page.locator("[data-vote-state]")).to_contain_text(f"you voted {letter} is better")
    first, second = (a, b) if col_b == 1 else (b, a)
    voted = server.manage("shell", "-c", VOTE.format(a=first, b=second)).split()[-3:]
    assert voted == ["1", str(col_b), "True"]
    page.reload()  # the vote is remembered on the page
    expect(page.get_by_role("button", name=f"{letter} is better")).to_have_class("chosen")

    page.goto("/chat/arena/")
    row = page.locator("#arena-pairs tbody tr").first
    cells = row.locator("td")
    names = [cells.nth(0).inner_text(), cells.nth(1).inner_text()]
    assert "Qwen compare B" in names
    b_index = names.index("Qwen compare B")
    assert cells.nth(2 + b_index).inner_text() == "1"  # B's wins
    assert cells.nth(3 - b_index).inner_text() == "0"  # the other's
    assert cells.nth(5).inner_text() == "1"  # votes
