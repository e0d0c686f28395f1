"""Answers rendered as Markdown in Chromium, safely: every element the chat renders, code
highlighted with a working copy button, a raw-text toggle, streaming that never replaces
what is already on screen, and a battery of hostile output (sparksim's `/sparksim echo`
makes the model say each payload verbatim) that runs nothing, fetches nothing and leaves
no element outside the allowlist (static/js/markdown.js)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.conftest import wait_for
from tests.e2e.conftest import READY_RUN, STATE, login

pytestmark = pytest.mark.e2e

DOC = """# Title one

Some **bold**, *italic*, ~~struck~~ and `inline code`, and [a link](https://example.org/docs).

## Second level

- apple
- banana
  - nested

3. three
4. four

> a quote

| name | tok/s |
|:-----|------:|
| 35B  |  52.1 |

```python
def hello(name):
    return f"hi {name}"
```

Inline math $E = mc^2$ and a block:

$$
\\frac{n(n+1)}{2}
$$

---

### Third level
"""

# Tags markdown.js may leave in an answer, and the panel's own chrome (code blocks).
ALLOWED = {
    "P", "BR", "HR", "H1", "H2", "H3", "H4", "H5", "H6", "UL", "OL", "LI", "BLOCKQUOTE", "PRE",
    "CODE", "EM", "STRONG", "S", "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "SPAN",
    "DIV", "BUTTON",
    # MathML, as Temml writes it
    "MATH", "MROW", "MI", "MO", "MN", "MS", "MTEXT", "MSPACE", "MSUP", "MSUB", "MSUBSUP",
    "MFRAC", "MSQRT", "MROOT", "MOVER", "MUNDER", "MUNDEROVER", "MTABLE", "MTR", "MTD",
    "MLABELEDTR", "MSTYLE", "MPADDED", "MPHANTOM", "MENCLOSE", "MMULTISCRIPTS",
    "MPRESCRIPTS", "NONE", "SEMANTICS",
}  # fmt: skip
MATH_ATTRS = {
    "display", "displaystyle", "scriptlevel", "mathvariant", "stretchy", "fence", "form",
    "separator", "lspace", "rspace", "movablelimits", "accent", "accentunder", "largeop",
    "symmetric", "minsize", "maxsize", "width", "linethickness", "notation", "columnalign",
    "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame",
    "framespacing", "voffset", "columnspan", "rowspan",
}  # fmt: skip
ALLOWED_ATTRS = {"href", "title", "class", "start", "target", "rel", "type", "data-rendered",
                 "hidden"}  # fmt: skip

# Each payload on its own line: what a hostile model might write.
HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '<img src="x" onerror="window.__pwned = 2">',
    "[x](javascript:alert(1))",
    '<svg onload="window.__pwned = 3"><circle r="5"/></svg>',
    '<iframe src="http://127.0.0.9:9/frame"></iframe>',
    "[open me](data:text/html,<script>alert(1)</script>)",
    '<a href="http://10.0.0.1/">lan</a>',
    "![tracker](http://127.0.0.9:9/pixel.png)",
    '<div style="position:fixed;inset:0;background:red">cover</div>',
    "[vb](vbscript:msgbox(1)) [file](file:///etc/passwd)",
    # TeX that would link, load an image, colour or cover the page (Temml, trust off)
    "$\\href{javascript:alert(1)}{x}$ $\\url{http://127.0.0.9:9/u}$",
    "$\\includegraphics{http://127.0.0.9:9/m.png}$ $\\htmlStyle{position:fixed}{x}$",
    "$\\color{red}{x}$ $\\rule{9999em}{9999em}$ $\\colorbox{red}{x}$",
]

# Every element in the rendered answers, with attributes: what a check walks.
DOM_AUDIT = """
() => [...document.querySelectorAll('#chat-log [data-rendered] *')].map(el => ({
  tag: el.tagName,
  attrs: [...el.attributes].map(a => [a.name, a.value]),
}))
"""


@pytest.fixture
def chat_page(new_page, live_server_asgi, demo_worker):
    pk = live_server_asgi.manage("shell", "-c", READY_RUN).strip().splitlines()[-1]
    wait_for(lambda: live_server_asgi.manage("shell", "-c", STATE.format(pk=pk)).split()[-1] == "ready",
             120, f"run {pk} ready")  # fmt: skip
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login(page, "mia")
    page.goto("/chat/")
    page.get_by_role("button", name="New chat").click()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=15_000)
    return page


def ask(page, text: str):
    answers = page.locator("#chat-log .chat-assistant")
    before = answers.count()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=15_000)
    page.get_by_label("Message", exact=True).fill("/sparksim echo " + text)
    page.get_by_role("button", name="Send", exact=True).click()
    expect(answers).to_have_count(before + 1)
    answer = answers.nth(before)
    expect(answer.locator("[data-stats]")).to_contain_text("finish:", timeout=30_000)
    return answer


def test_every_markdown_element_renders_code_is_highlighted_and_copied_raw_is_a_toggle(
    chat_page,
):
    page = chat_page
    answer = ask(page, DOC)
    view = answer.locator("[data-rendered]")
    expect(view.locator("h1")).to_have_text("Title one")
    expect(view.locator("h2")).to_have_text("Second level")
    expect(view.locator("h3")).to_have_text("Third level")
    expect(view.locator("strong")).to_have_text("bold")
    expect(view.locator("em")).to_have_text("italic")
    expect(view.locator("s")).to_have_text("struck")
    expect(view.locator("p > code")).to_have_text("inline code")
    link = view.locator("a", has_text="a link")
    expect(link).to_have_attribute("href", "https://example.org/docs")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(view.locator("ul > li")).to_have_count(3)  # apple, banana, nested
    expect(view.locator("ul ul > li")).to_have_text("nested")
    expect(view.locator("ol")).to_have_attribute("start", "3")
    expect(view.locator("blockquote")).to_contain_text("a quote")
    expect(view.locator("hr")).to_have_count(1)
    expect(view.locator("table th")).to_have_text(["name", "tok/s"])
    expect(view.locator("table td").nth(1)).to_have_class("md-align-right")
    # Math as MathML (Temml): inline and as a block.
    expect(view.locator(".md-math math")).to_have_count(1)
    expect(view.locator(".md-math math")).to_contain_text("mc")
    expect(view.locator(".md-math-block math[display=block] mfrac")).to_have_count(1)
    # Fenced code: highlighted by highlight.js, labelled, with a copy button that copies.
    code = view.locator("pre code.language-python")
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(view.locator(".md-code-head")).to_contain_text("python")
    view.get_by_role("button", name="Copy").click()
    expect(view.get_by_role("button", name="Copied")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == 'def hello(name):\n    return f"hi {name}"\n'
    # The whole answer's Copy: exactly what the model wrote (its Markdown).
    answer.locator("[data-copy-answer]").click()
    expect(answer.locator("[data-copy-answer]")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == DOC
    # Raw text: exactly what the model wrote; and back.
    answer.get_by_role("button", name="Raw text").click()
    expect(answer.locator("[data-content]")).to_be_visible()
    assert answer.locator("[data-content]").text_content() == DOC
    expect(view).to_be_hidden()
    answer.get_by_role("button", name="Formatted").click()
    expect(view).to_be_visible()
    # A reload renders the saved answer the same way.
    page.reload()
    view = page.locator(".chat-assistant").last.locator("[data-rendered]")
    expect(view.locator("h1")).to_have_text("Title one")
    expect(view.locator("pre code .hljs-keyword").first).to_have_text("def")


def test_streaming_appends_finished_blocks_and_never_replaces_them(chat_page):
    page = chat_page
    # Room for 80 short blocks, ~1,600 tokens (the conversation's default is 1,024): about
    # a second of streaming at the demo host's 40x, many batches even on a busy machine.
    page.get_by_label("Max tokens").fill("4000")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("#messages")).to_contain_text("Settings saved")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    paragraphs = [f"Paragraph {i} says {words}." for i in range(80)]
    text = "\n\n".join(paragraphs)
    # Watch the log: every finished part added while the answer streams, and any node
    # removed from a finished part (there must be none).
    page.evaluate("""() => {
      window.__parts = 0; window.__replaced = 0; window.__tailRenders = 0;
      new MutationObserver((records) => {
        for (const r of records) {
          for (const n of r.addedNodes) {
            if (n.nodeType === 1 && n.classList.contains('md-part') &&
                !n.classList.contains('md-tail') &&
                n.closest('.chat-msg').classList.contains('status-streaming')) window.__parts++;
          }
          if (r.target.nodeType === 1 && r.target.classList.contains('md-tail')) window.__tailRenders++;
          for (const n of r.removedNodes) {
            const inTail = r.target.closest && r.target.closest('.md-tail');
            if (!inTail && n.nodeType === 1 && n.classList.contains('md-part')) window.__replaced++;
            if (!inTail && r.target.closest && r.target.closest('.md-part')) window.__replaced++;
          }
        }
      }).observe(document.getElementById('chat-log'), {childList: true, subtree: true});
    }""")
    answer = ask(page, text)
    parts = page.evaluate("window.__parts")
    assert parts >= 2, f"only {parts} finished block(s) were appended while streaming"
    assert page.evaluate("window.__tailRenders") >= 2
    assert page.evaluate("window.__replaced") == 0
    view = answer.locator("[data-rendered]")
    expect(view.locator("p")).to_have_count(80)
    expect(view.locator("p").nth(79)).to_have_text(f"Paragraph 79 says {words}.")
    expect(answer.locator("[data-stats]")).to_contain_text("finish: stop")


def test_hostile_output_runs_nothing_fetches_nothing_and_stays_in_the_allowlist(chat_page):
    page = chat_page
    origin = page.url.split("/chat/")[0]
    requests: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for payload in HOSTILE:
        answer = ask(page, payload)
        assert answer.locator("[data-content]").text_content() == payload
    # Once more all together (a multi-block answer), and after a reload (the saved copy).
    ask(page, "\n\n".join(HOSTILE))
    page.reload()
    expect(page.locator(".chat-assistant")).to_have_count(len(HOSTILE) + 1)
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__pwned") is None
    assert dialogs == []
    # No request left the panel, and none went to fetch an image or a frame.
    assert [u for u in requests if not u.startswith(origin)] == []
    # Same-origin, only the page itself, its static files, the panel's live fragments and
    # a saved message's JSON: nothing an answer names (x, /frame, pixel.png, 10.0.0.1).
    page_path = page.url[len(origin) :]
    made = [u[len(origin) :] for u in requests]
    assert all(
        u == page_path or u.startswith(("/static/", "/live/", "/chat/messages/")) for u in made
    ), made
    for element in page.evaluate(DOM_AUDIT):
        assert element["tag"].upper() in ALLOWED, element
        for name, value in element["attrs"]:
            assert name in ALLOWED_ATTRS | MATH_ATTRS, element
            if name == "href":
                assert value.startswith(("https://", "http://", "mailto:")), element
    # What survives as a link is an ordinary http(s) link that opens nothing by itself.
    hrefs = page.locator("#chat-log [data-rendered] a[href]").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))"
    )
    assert set(hrefs) <= {
        "http://10.0.0.1/",
        "http://127.0.0.9:9/pixel.png",
        "http://127.0.0.9:9/frame",
    }, hrefs
    assert (
        page.locator("#chat-log script, #chat-log img, #chat-log svg, #chat-log iframe").count()
        == 0
    )


def test_edit_resends_a_message_and_regenerate_replaces_the_last_answer(chat_page):
    page = chat_page
    ask(page, "first **question**")
    ask(page, "second")
    log = page.locator("#chat-log")
    expect(log.locator(".chat-user")).to_have_count(2)
    # Only the last answer offers Regenerate.
    expect(
        log.locator(".chat-assistant").first.get_by_role("button", name="Regenerate")
    ).to_be_hidden()
    # Edit the first question: what followed it goes, the new answer streams in.
    log.locator(".chat-user").first.get_by_role("button", name="Edit").click()
    editor = log.get_by_label("Edit message")
    editor.fill("/sparksim echo edited **answer**")
    log.get_by_role("button", name="Save & send").click()
    answer = log.locator(".chat-assistant").last
    expect(answer.locator("[data-stats]")).to_contain_text("finish:", timeout=30_000)
    expect(log.locator(".chat-user")).to_have_count(1)
    expect(log.locator(".chat-user [data-content]")).to_have_text(
        "/sparksim echo edited **answer**"
    )
    expect(answer.locator("[data-rendered] strong")).to_have_text("answer")
    first_id = answer.get_attribute("data-message")
    # Regenerate: the same question, a new answer in place of the old one.
    answer.get_by_role("button", name="Regenerate").click()
    answer = log.locator(".chat-assistant").last
    expect(answer).not_to_have_attribute("data-message", first_id)
    expect(answer.locator("[data-stats]")).to_contain_text("finish:", timeout=30_000)
    expect(log.locator(".chat-assistant")).to_have_count(1)
    expect(answer.locator("[data-rendered]")).to_have_text("edited answer")
    page.reload()  # saved as shown
    expect(page.locator("#chat-log .chat-msg")).to_have_count(2)
