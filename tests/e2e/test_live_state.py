"""Pages that never lie, as three people at once (a member, an operator and an admin) in a
real browser: a job that fails while its page is open shows the failure and loses its
Cancel without a reload; an operator's notice reaches every open page; a page whose socket
was down while things changed shows the current state once it reconnects
(docs/live-updates.md)."""

import pytest
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.e2e.conftest import live, login, run_queued_job

pytestmark = pytest.mark.e2e

CANCEL = """
from django.contrib.auth import get_user_model
from apps.benchmarks.models import Job
from apps.benchmarks.services import job_cancel
job_cancel(job=Job.objects.get(pk={job}), user=get_user_model().objects.get(username="otto"))
"""
NOTICE = """
from django.contrib.auth import get_user_model
from apps.core.services import notice_post
notice_post(author=get_user_model().objects.get(username="otto"), message={message!r})
"""
NOTICES_AFTER = """
from apps.core.models import Notice
Notice.objects.filter(pk__gt={pk}).delete()
"""
LAST_NOTICE = (
    "from apps.core.models import Notice; "
    "print(Notice.objects.order_by('-pk').values_list('pk', flat=True).first() or 0)"
)


@pytest.fixture
def own_notices(live_server_asgi):
    """The notices a test posts are deleted after it (they would show on every page)."""
    last = live_server_asgi.manage("shell", "-c", LAST_NOTICE).split()[-1]
    yield live_server_asgi
    live_server_asgi.manage("shell", "-c", NOTICES_AFTER.format(pk=int(last)))


# Records every live element that leaves the page (a replaced element is removed), from
# before the page's own scripts run.
WATCH_REPLACED = """
window.__liveReplaced = [];
new MutationObserver((records) => {
  for (const record of records) for (const node of record.removedNodes)
    if (node.nodeType === 1 && node.id && node.hasAttribute("data-live-src"))
      window.__liveReplaced.push(node.id);
}).observe(document, {childList: true, subtree: true});
"""
ALL_FETCHED = (
    "() => [...document.querySelectorAll('[data-live-src][id]')].every(e => e.dataset.liveSeq)"
)


def test_opening_a_page_keeps_what_did_not_change_and_the_keyboard_focus_on_it(
    new_page, busy_demo_host
):
    """The socket's open fetches every live element; those whose state did not change since
    the page was rendered (her Cancel button too: only its CSRF token differs) are kept,
    so the focus stays where she put it. A real change still replaces."""
    server, ids = busy_demo_host
    page = new_page()
    page.add_init_script(WATCH_REPLACED)
    login(page, "mia")
    page.goto(f"/benchmarks/jobs/{ids['job']}/")
    cancel = page.get_by_role("button", name="Cancel")
    cancel.focus()
    live(page)
    wait_for(lambda: page.evaluate(ALL_FETCHED), timeout=15, what="every live element fetched")
    assert page.evaluate("window.__liveReplaced") == []
    expect(cancel).to_be_focused()

    server.manage("shell", "-c", CANCEL.format(job=ids["job"]))
    progress = page.locator(f"#job-{ids['job']}-progress")
    expect(progress.locator(".state-badge")).to_have_text("Cancelled", timeout=30_000)
    assert f"job-{ids['job']}-progress" in page.evaluate("window.__liveReplaced")


def test_a_job_that_fails_while_its_page_is_open_shows_it_without_a_reload(
    new_page, busy_demo_host
):
    server, ids = busy_demo_host
    job_url = f"/benchmarks/jobs/{ids['job']}/"
    member, admin, operator = new_page(), new_page(), new_page()
    login(member, "mia")
    login(admin, "ada")
    login(operator, "otto")
    member.goto(job_url)
    admin.goto(job_url)
    operator.goto("/benchmarks/")
    for page in (member, admin):
        expect(page.locator(f"#job-{ids['job']}-progress .state-badge")).to_have_text("Queued")
        expect(page.get_by_role("button", name="Cancel")).to_be_visible()  # hers; an admin's
    queue = operator.locator("#queue-local-sim")
    expect(queue).to_contain_text(f"job {ids['job']}")
    for page in (member, admin, operator):
        live(page)

    # The host's worker takes the job and fails it at once: local-sim serves another
    # recipe, pinned.
    run_queued_job(server, ids["job"])

    for page in (member, admin):
        progress = page.locator(f"#job-{ids['job']}-progress")
        expect(progress.locator(".state-badge")).to_have_text("Failed", timeout=30_000)
        expect(progress.get_by_role("alert")).to_be_visible()  # why, in the job's words
        expect(page.get_by_role("button", name="Cancel")).to_have_count(0)
        expect(page.get_by_role("link", name="CSV")).to_be_visible()  # the rest of the bar stays
    # The operator's queue page dropped the job from local-sim's queue.
    expect(queue).not_to_contain_text(f"job {ids['job']}", timeout=30_000)
    expect(queue).to_contain_text("Idle")


def test_an_operators_notice_reaches_every_open_page_of_a_member(new_page, own_notices):
    pages = {}
    for path in ("/", "/runs/", "/recipes/"):
        page = new_page()
        login(page, "mia")
        page.goto(path)
        live(page)
        pages[path] = page
    admin = new_page()
    login(admin, "ada")
    admin.goto("/benchmarks/")
    live(admin)

    operator = new_page()
    login(operator, "otto")
    text = "Taking local-sim down for an image update at 14:00"
    operator.get_by_placeholder("e.g. Swapping").fill(text)
    operator.get_by_role("button", name="Post notice").click()

    expect(pages["/"].locator("#notices li.notice").first).to_contain_text(text)
    for path in ("/runs/", "/recipes/"):
        strip = pages[path].locator("#notices-strip")
        expect(strip).to_be_visible()
        expect(strip).to_contain_text(text)
        expect(strip).to_contain_text("otto")
    expect(admin.locator("#notices-strip")).to_contain_text(text)
    # On her dashboard the list is fetched per user: a member gets no Delete button on
    # the operator's notice, the operator does.
    first = pages["/"].locator("#notices li.notice").first
    expect(first.get_by_role("button", name="Delete")).to_have_count(0)
    expect(operator.locator("#notices li.notice").first).to_contain_text(text)
    expect(operator.locator("#notices li.notice").first.get_by_role("button")).to_be_visible()


def test_a_page_that_reconnects_shows_what_changed_while_it_was_offline(
    new_page, busy_demo_host, own_notices
):
    server, ids = busy_demo_host
    job_url = f"/benchmarks/jobs/{ids['job']}/"
    member, operator = new_page(), new_page()
    login(member, "mia")
    login(operator, "otto")
    member.goto(job_url)
    operator.goto(job_url)
    live(member)
    live(operator)
    badge = member.locator(f"#job-{ids['job']}-progress .state-badge")
    expect(badge).to_have_text("Queued")

    member.evaluate("window.SparkEvents.disconnect()")
    expect(member.locator("#live-status")).to_have_text("offline")
    # While her socket is down: the operator cancels her job and posts a notice.
    server.manage("shell", "-c", CANCEL.format(job=ids["job"]))
    message = "Back at 15:00 — local-sim reserved for the image test"
    server.manage("shell", "-c", NOTICE.format(message=message))
    operator_badge = operator.locator(f"#job-{ids['job']}-progress .state-badge")
    expect(operator_badge).to_have_text("Cancelled")  # the push went out …
    expect(badge).to_have_text("Queued")  # … and did not reach the offline page
    expect(member.get_by_role("button", name="Cancel")).to_be_visible()

    member.evaluate("window.__notReloaded = true")
    synced = int(member.evaluate("document.body.dataset.liveSynced || '0'"))
    member.evaluate("window.SparkEvents.connect()")
    wait_for(
        lambda: int(member.evaluate("document.body.dataset.liveSynced || '0'")) > synced,
        30,
        "the page to fetch its live elements on reconnect",
    )
    live(member)
    expect(badge).to_have_text("Cancelled")
    expect(member.get_by_role("button", name="Cancel")).to_have_count(0)
    expect(member.locator("#notices-strip")).to_contain_text(message)
    assert member.evaluate("window.__notReloaded === true")  # the same page, never reloaded


EXPIRING = """
import datetime as dt
from django.contrib.auth import get_user_model
from django.utils import timezone
from apps.core.services import notice_post
notice_post(author=get_user_model().objects.get(username="otto"), message={message!r},
            expires_at=timezone.now() + dt.timedelta(seconds={seconds}))
"""


def test_an_expired_notice_leaves_open_pages(new_page, own_notices):
    live_server_asgi = own_notices
    page = new_page()
    login(page, "mia")
    page.goto("/runs/")
    live(page)
    message = "A short-lived notice for the expiry test"
    live_server_asgi.manage("shell", "-c", EXPIRING.format(message=message, seconds=8))
    strip = page.locator("#notices-strip")
    expect(strip).to_contain_text(message)
    expect(strip).not_to_contain_text(message, timeout=40_000)  # gone without a reload
