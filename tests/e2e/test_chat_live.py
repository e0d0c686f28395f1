"""Issue #43 in Chromium. Point 4: an open chat page follows its run (an operator stops it:
the page stops saying "ready" and turns Send off, saying why), its composer holds still
while an answer streams and after a refusal, and a Send pressed before the page's script
has run posts (never a GET with the message in its URL) and gets the message back. Point
7: on a phone (390 px) the run page's "Plan against measured" table, and the other wide
tables, scroll inside their own box; the page never gets wider than the phone."""

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.e2e.conftest import STATE, login
from tests.e2e.test_import_results import import_file, vllm_file

pytestmark = pytest.mark.e2e

# What an operator's Stop does (apps/runs/services.py::run_stop), from outside the page.
STOP_RUN = (
    "from apps.runs.models import Run; from apps.runs.services import run_stop; "
    "run_stop(run=Run.objects.get(pk={pk}), reason='stopped by an operator')"
)
RECIPE = "qwen3-5-35b-max-single-user"  # READY_RUN's recipe
PHONE = {"width": 390, "height": 844}
# The composer's box and Send button, as laid out now.
COMPOSER = """() => {
  const form = document.getElementById("chat-form");
  const width = (el) => el.getBoundingClientRect().width;
  return [width(form.querySelector("textarea")), width(form.querySelector("button[type=submit]"))];
}"""


def _new_chat(page, run: str) -> None:
    """A member's new conversation with `run` (other tests may leave other runs ready)."""
    login(page, "mia")
    page.get_by_role("link", name="Chat", exact=True).click()
    page.locator("select[name=run]").select_option(run)
    page.get_by_role("button", name="New chat").click()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)


def test_the_composer_holds_still_while_an_answer_streams_and_after_a_refusal(new_page, ready_run):
    page = new_page()
    _new_chat(page, ready_run)
    before = page.evaluate(COMPOSER)
    box = page.get_by_label("Message")
    box.fill("/sparksim echo " + " ".join(f"word{i}" for i in range(6000)))
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".chat-assistant").last
    expect(answer.locator("[data-content]")).to_contain_text("word1", timeout=15_000)
    expect(page.locator("[data-chat-state]")).to_have_text("answering…")
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    assert page.evaluate(COMPOSER) == pytest.approx(before, abs=0.5)  # Stop shown, answering
    page.get_by_role("button", name="Stop").click()
    expect(answer.locator("[data-stats]")).to_contain_text("stopped", timeout=10_000)
    expect(page.locator("[data-chat-state]")).to_have_text("ready")
    assert page.evaluate(COMPOSER) == pytest.approx(before, abs=0.5)
    # A refused send: the panel's reason is written under the box; nothing moves.
    box.fill("x" * 100_001)
    page.get_by_role("button", name="Send").click()
    expect(page.locator("[data-chat-state]")).to_have_text("at most 100,000 characters")
    assert page.evaluate(COMPOSER) == pytest.approx(before, abs=0.5)
    expect(box).to_have_value("x" * 100_001)  # given back to the box


def test_a_send_before_the_pages_script_ran_posts_and_gets_the_message_back(
    browser, live_server_asgi, ready_run
):
    # No JavaScript at all: what a Send pressed before chat.js has loaded does.
    context = browser.new_context(base_url=live_server_asgi.url, java_script_enabled=False)
    try:
        page = context.new_page()
        login(page, "mia")
        page.goto("/chat/")
        page.locator("select[name=run]").select_option(ready_run)
        page.get_by_role("button", name="New chat").click()
        conversation = page.url
        box = page.get_by_label("Message")
        box.fill("my secret question")
        with page.expect_navigation():
            page.get_by_role("button", name="Send").click()
        assert "secret" not in page.url and "content=" not in page.url, page.url
        assert page.url.endswith("/send/") and page.url.startswith(conversation)
        expect(page.locator("#messages")).to_contain_text("Not sent yet")
        expect(page.get_by_label("Message")).to_have_value("my secret question")
    finally:
        context.close()
    log = live_server_asgi.log.read_text()
    assert "my+secret" not in log and "my%20secret" not in log


def test_an_open_chat_says_its_run_stopped_and_turns_send_off(
    new_page, live_server_asgi, ready_run
):
    page = new_page()
    _new_chat(page, ready_run)
    state = page.get_by_test_id("chat-run-state")
    expect(state).to_have_text("ready")
    live_server_asgi.manage("shell", "-c", STOP_RUN.format(pk=ready_run))
    # Pushed to the open page: no reload.
    expect(state).to_have_text(re.compile(r"^(stopping|stopped)$"), timeout=15_000)
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    line = page.locator("[data-chat-state]")
    expect(line).to_contain_text(f"Send is off: run {ready_run} is stop")
    expect(line).to_contain_text("Reload the page to go on with another ready run.")
    wait_for(lambda: live_server_asgi.manage("shell", "-c", STATE.format(pk=ready_run)).split()[-1]
             == "stopped", 60, f"run {ready_run} stopped")  # fmt: skip
    expect(state).to_have_text("stopped")
    # Ctrl+Enter sends nothing either: the message stays in the box.
    box = page.get_by_label("Message")
    box.fill("anyone there?")
    box.press("Control+Enter")
    page.wait_for_timeout(500)
    expect(box).to_have_value("anyone there?")
    expect(page.locator(".chat-user")).to_have_count(0)


def test_on_a_phone_wide_tables_scroll_in_their_own_box_not_the_page(
    new_page, live_server_asgi, ready_run
):
    page = new_page()
    login(page, "mia")
    import_file(page, "phone-c2.json", vllm_file(2, 0.3))  # a job with results tables
    page.wait_for_url(re.compile(r"/benchmarks/jobs/\d+/"))
    job = page.url
    page.set_viewport_size(PHONE)
    page.goto(f"/runs/{ready_run}/")
    check = page.locator(f"#run-{ready_run}-plan-check")
    expect(check.locator("td.measured").first).not_to_have_text("—")  # vLLM measured it
    pages = [f"/runs/{ready_run}/", f"/recipes/{RECIPE}/", "/runs/", "/hosts/local-sim/",
             "/hosts/local-sim/models/", "/benchmarks/", "/benchmarks/suites/", job,
             "/chat/"]  # fmt: skip
    for path in pages:
        page.goto(path)
        page.wait_for_load_state("load")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"{path} is {width} px wide on a 390 px phone"
    # The plan table is wider than the phone: it scrolls inside its own box.
    page.goto(f"/runs/{ready_run}/")
    box = page.locator(f"#run-{ready_run}-plan-check .table-wrap")
    assert box.evaluate("el => el.scrollWidth > el.clientWidth && el.clientWidth <= 390")
