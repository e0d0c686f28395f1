"""A member chats with the demo model in Chromium: the answer streams in, Stop cuts it
short, and hostile model output stays inert text."""

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login

pytestmark = pytest.mark.e2e

HOSTILE = (
    '<script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2"> '
    '[click me](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">link</a>'
)


def test_member_chats_sees_the_answer_stream_stops_one_and_hostile_output_is_inert(
    new_page, ready_run
):
    page = new_page()
    login(page, "mia")
    page.get_by_role("link", name="Chat", exact=True).click()
    page.get_by_role("button", name="New chat").click()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)

    # 1. Hostile output renders as text: nothing runs, no element is created from it.
    box = page.get_by_label("Message")
    box.fill("/sparksim echo " + HOSTILE)
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".chat-assistant").last
    expect(answer.locator("[data-stats]")).to_contain_text("finish: stop", timeout=30_000)
    expect(answer.locator("[data-content]")).to_have_text(HOSTILE)
    assert page.evaluate("window.__pwned") is None
    assert (
        page.locator("#chat-log img, #chat-log script, #chat-log a[href^='javascript']").count()
        == 0
    )
    page.reload()  # the saved copy is rendered safely by the server too
    expect(page.locator(".chat-assistant [data-content]").last).to_have_text(HOSTILE)
    assert page.evaluate("window.__pwned") is None

    # 2. A long answer streams in; Stop ends it at once and the partial text stays.
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=10_000)
    long_text = " ".join(f"word{i}" for i in range(6000))
    box.fill("/sparksim echo " + long_text)
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".chat-assistant").last
    expect(answer.locator("[data-content]")).to_contain_text("word1", timeout=15_000)
    page.get_by_role("button", name="Stop").click()
    expect(answer.locator("[data-stats]")).to_contain_text("stopped", timeout=10_000)
    partial = answer.locator("[data-content]").inner_text()
    assert "word1" in partial and "word5999" not in partial
    expect(page.get_by_role("button", name="Stop")).to_be_hidden()
    # Saved: the conversation list shows it, and the page reloads with the partial answer.
    page.reload()
    expect(page.locator(".chat-assistant").last).to_contain_text("stopped")
    expect(page.locator("h1")).to_contain_text("sparksim echo")  # titled by its first message
