"""Lists and links that follow what other people do, in Chromium, with two or three people
at once (issue 43): a run restarted by an operator links every open page of the old run to
the new one and drops its "Start again", a reload too; a run another user starts appears
on every open Runs list its filters allow, its state live; a benchmark job that ends
appears in every open Benchmarks page's finished jobs, the boxes ticked there staying
ticked (docs/runs.md, docs/benchmarks.md, docs/live-updates.md)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import STOP_ACTIVE, busy_local_sim, live, login, pick_host, run_queued_job

pytestmark = pytest.mark.e2e

QWEN = "qwen3-5-35b-max-single-user"
# A ready run of the Qwen preset on local-sim, made directly (no model runs: a stand-in).
# A restart stops it (it has no server to stop) and starts the recipe again for real.
STAND_IN = f"""
from apps.hosts.models import Host
from apps.recipes.models import Recipe
from apps.runs.models import Run
host = Host.objects.get(name="local-sim")
recipe = Recipe.objects.get(slug="{QWEN}")
print(Run.objects.create(recipe=recipe, host=host, port=host.port_max, image=recipe.image,
                         argv=[], state="ready", step="Ready (a stand-in for the test)").pk)
"""
# The version of the Runs list's rows a page shows (0: none yet).
ROWS_SEQ = "() => Number(document.getElementById('runs-rows')?.dataset.liveSeq || 0)"


@pytest.fixture
def demo_host(idle_demo_host):
    """local-sim idle; whatever a test started there is stopped after it."""
    yield idle_demo_host
    idle_demo_host.manage("shell", "-c", STOP_ACTIVE)


def test_a_restart_by_someone_else_links_the_old_runs_open_pages_to_the_new_run(
    new_page, demo_host
):
    old = demo_host.manage("shell", "-c", STAND_IN).strip().splitlines()[-1]
    admin, member, operator = new_page(), new_page(), new_page()
    for page, name in ((admin, "ada"), (member, "mia"), (operator, "otto")):
        login(page, name)
        page.goto(f"/runs/{old}/")
        live(page)
    lineage = admin.get_by_test_id("run-lineage")
    expect(lineage).to_be_hidden()  # nothing to link yet

    # The operator restarts it (Restart asks first).
    operator.get_by_role("button", name="Restart").click()
    operator.get_by_role("button", name=f"Yes, restart run {old}").click()

    # The host's worker stops the old run and starts the recipe again as a new run: both
    # open pages link to it without a reload, and the admin is not offered "Start again"
    # beside it.
    new_run = re.compile(r"^run (\d+)$")
    for page in (admin, member):
        link = page.get_by_test_id("run-lineage").get_by_role("link", name=new_run)
        expect(link).to_be_visible(timeout=60_000)
        expect(page.locator(f"#run-{old}-progress .state-badge")).to_have_text("Stopped")
    new = new_run.match(admin.get_by_test_id("run-lineage").get_by_role("link").text_content())
    assert new and new.group(1) != old
    expect(lineage).to_contain_text(f"Restarted as run {new.group(1)}")
    expect(admin.get_by_role("button", name="Start again")).to_have_count(0)
    expect(admin.get_by_role("button", name="Restart")).to_have_count(0)

    # The link leads to the new run, which says what it restarts.
    admin.get_by_test_id("run-lineage").get_by_role("link").click()
    expect(admin).to_have_url(re.compile(rf"/runs/{new.group(1)}/$"))
    expect(admin.get_by_test_id("run-lineage")).to_contain_text(f"A restart of run {old}")

    # After a reload the old run's page says the same: the link, no "Start again".
    admin.goto(f"/runs/{old}/")
    expect(admin.get_by_test_id("run-lineage")).to_contain_text(f"Restarted as run {new.group(1)}")
    expect(admin.locator(f"#run-{old}-actions")).to_be_attached()
    expect(admin.get_by_role("button", name="Start again")).to_have_count(0)


def test_a_run_another_user_starts_appears_on_the_open_runs_lists_it_belongs_to(
    new_page, demo_host
):
    member, admin = new_page(), new_page()
    login(member, "mia")
    login(admin, "ada")
    member.goto("/runs/")
    admin.goto("/runs/?state=failed")  # a filtered list: a starting run is not one of them
    for page in (member, admin):
        live(page)
    admin_seq = admin.evaluate(ROWS_SEQ)

    operator = new_page()
    login(operator, "otto")
    operator.goto("/runs/")
    start = operator.locator("#start-form")
    start.get_by_label("Recipe").select_option(
        label="Qwen3.5-35B-A3B — max single-user throughput (util 0.90)"
    )
    pick_host(start.get_by_label("Host"), "local-sim")
    start.get_by_role("button", name="Start").click()
    expect(operator).to_have_url(re.compile(r"/runs/\d+/$"))
    pk = re.search(r"/runs/(\d+)/$", operator.url).group(1)

    # The member's list shows the new run at the top, with who started it; its state
    # follows the run.
    row = member.get_by_role("row").filter(has=member.get_by_role("link", name=pk, exact=True))
    expect(row).to_be_visible(timeout=15_000)
    expect(member.locator("tbody tr").first).to_have_id(f"run-{pk}-row")
    expect(row).to_contain_text("otto")
    expect(row.get_by_role("link", name=pk, exact=True)).to_have_attribute("href", f"/runs/{pk}/")
    expect(row.locator(".state-badge")).not_to_have_text("Queued", timeout=60_000)
    # The failed-runs list was told too (it fetched its rows again) and did not take it.
    admin.wait_for_function(f"(seq) => ({ROWS_SEQ})() > seq", arg=admin_seq)
    expect(admin.get_by_role("link", name=pk, exact=True)).to_have_count(0)


def finished_row(page, job: int):
    """The job's row in the page's Finished jobs."""
    section = page.locator("section").filter(has=page.get_by_role("heading", name="Finished jobs"))
    return section.get_by_role("row").filter(
        has=page.get_by_role("link", name=f"job {job}", exact=True)
    )


def test_a_job_that_ends_appears_in_the_open_finished_jobs_and_ticks_stay(new_page, demo_host):
    with busy_local_sim(demo_host, finished=True) as ids:
        member, admin = new_page(), new_page()
        login(member, "mia")
        login(admin, "ada")
        for page in (member, admin):
            page.goto("/benchmarks/")
            live(page)
            expect(finished_row(page, ids["done"])).to_be_visible()
            expect(finished_row(page, ids["job"])).to_have_count(0)
        tick = member.get_by_label(f"Compare job {ids['done']}")
        tick.check()

        # The host's worker takes the job and fails it at once (the run there is pinned).
        run_queued_job(demo_host, ids["job"])

        for page in (member, admin):
            row = finished_row(page, ids["job"])
            expect(row).to_be_visible(timeout=30_000)
            expect(row.locator(".state-badge")).to_have_text("Failed")
            expect(row).to_have_id(f"job-{ids['job']}-finished")
            # ...and it left the host's queue.
            expect(page.locator("#queue-local-sim")).not_to_contain_text(f"job {ids['job']}")
        expect(tick).to_be_checked()  # the list around her tick changed; her tick did not
