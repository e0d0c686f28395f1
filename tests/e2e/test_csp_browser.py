"""The Content-Security-Policy in Chromium: the main pages work under it and it refuses
nothing they do. Every `securitypolicyviolation` event and every console report of a
refusal is recorded, on the login page, the dashboard, a ready run's page with its live
charts, a benchmark job's charts and a comparison, the wizard and its live plan (htmx
swaps), a chat exchange over its socket (an answer with math: Temml's MathML), the hosts,
the recipe page's delete confirmation (an event handler in events.js now, not an inline
onsubmit), the profile, the API docs (Swagger UI) and the Django admin: zero violations.

A control proves the recorder sees violations: an inline script the test adds is refused
and reported.

Math, quickly and without the live server: static/ served under the panel's own policy,
every Temml construct that writes a style attribute rendered by markdown.js with no
violation, no style attribute, and its layout kept as classes.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest
from playwright.sync_api import expect

from apps.core.csp import DIRECTIVES
from tests.conftest import ROOT
from tests.e2e.conftest import login

# Run alone, the test pays for the session's live server, worker and a ready model, then
# walks fourteen pages (Swagger UI's bundle among them): more than 300 s on a busy machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

RECORDER = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push([e.violatedDirective, e.blockedURI, e.sourceFile, e.lineNumber,
                     (e.sample || "").slice(0, 80)].join(" | "));
}, true);
"""

SEED_JOBS = """
import json
from django.utils import timezone
from apps.benchmarks.models import Job, Result, Suite
from apps.benchmarks.selectors import suite_plan
from apps.hosts.models import Host
from apps.recipes.models import Recipe
suite = Suite.objects.first()
recipe = Recipe.objects.get(slug="qwen3-5-35b-max-single-user")
host = Host.objects.get(name="local-sim")
ids = []
for n in range(2):
    job = Job.objects.create(suite=suite, recipe=recipe, host=host, plan=suite_plan(suite),
        state="done", started_at=timezone.now(), finished_at=timezone.now(),
        note="csp seeded", context={"image": "sparksim", "host": host.name, "simulated": True})
    for c in (1, 2, 4):
        Result.objects.create(job=job, kind="sweep", scenario=f"c{c}", prompt_tokens=200,
            output_tokens=128, concurrency=c, ok=4, ttft_p50_s=0.2 * c, ttft_p95_s=0.3 * c,
            ttft_p99_s=0.4 * c, e2e_p50_s=6.0, decode_tps_p50=30.0 / c, prefill_tps_p50=900.0,
            output_tps=30.0 * c ** 0.8, request_rps=0.2 * c, metrics={"tpot": {"p50": 0.04}})
    ids.append(job.pk)
print(json.dumps(ids))
"""
CLEANUP = 'from apps.benchmarks.models import Job; Job.objects.filter(note="csp seeded").delete()'

# The chat's answer: text, inline math with an accent, and a display matrix.
CHAT_ANSWER = """under the policy: $E = mc^2$ and $\\hat{x}$, and

$$
\\begin{pmatrix}a & b \\\\ c & d\\end{pmatrix}
$$
"""


@pytest.fixture
def done_jobs(live_server_asgi):
    out = live_server_asgi.manage("shell", "-c", SEED_JOBS)
    try:
        yield json.loads(out.strip().splitlines()[-1])
    finally:
        live_server_asgi.manage("shell", "-c", CLEANUP)


class Recorder:
    """Violations and refusals seen on a page, across its navigations."""

    def __init__(self, page):
        self.page = page
        self.seen: list[str] = []
        page.add_init_script(RECORDER)
        page.on("console", self._console)

    def _console(self, message) -> None:
        text = message.text
        if "Content Security Policy" in text or "Refused to" in text:
            self.seen.append(f"{self.page.url}: console: {text[:300]}")

    def collect(self, where: str) -> None:
        """The page's violation events so far (call before it navigates away)."""
        events = self.page.evaluate("window.__csp || []")
        self.seen += [f"{where}: {event}" for event in events]
        self.page.evaluate("window.__csp = []")

    def visit(self, path: str, ready: str, timeout: float = 15_000) -> None:
        self.page.goto(path)
        expect(self.page.locator(ready).first).to_be_visible(timeout=timeout)
        self.page.wait_for_load_state("networkidle")
        self.collect(path)


def test_the_main_pages_work_under_the_policy_with_no_violation(
    new_page, live_server_asgi, ready_run, done_jobs
):
    page = new_page()
    rec = Recorder(page)
    # The policy really is there, and the recorder sees what it refuses (the control).
    response = page.goto("/accounts/login/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = 1'; document.body.appendChild(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.__ran") is None, "an inline script ran"
    control = page.evaluate("window.__csp")
    assert control and "script-src" in control[0], control
    page.evaluate("window.__csp = []")
    rec.seen.clear()

    login(page, "ada")
    # The dashboard: its socket (connect-src) goes live.
    expect(page.locator("#live-status")).to_have_text("live", timeout=20_000)
    rec.collect("/")

    # A ready run: its page, the live telemetry charts (uPlot), the log.
    rec.visit(f"/runs/{ready_run}/", "canvas")
    # Benchmark charts (uPlot from json_script data) and a comparison.
    a, b = done_jobs
    rec.visit(f"/benchmarks/jobs/{a}/", "[data-bench-chart] canvas")
    rec.visit(f"/benchmarks/compare/?jobs={a},{b}", "canvas")
    rec.visit("/benchmarks/", "h1")
    rec.visit("/hosts/", ".gauge, h1")
    rec.visit("/hosts/local-sim/", "h1")

    # The wizard: typing swaps the live plan in through htmx (the pct-N width classes).
    rec.visit("/recipes/wizard/", "form")
    field = page.locator("fieldset.fields input:visible").first
    value = field.input_value()
    with page.expect_response(lambda r: "/recipes/plan" in r.url and r.request.method == "POST"):
        field.fill(value)
        field.dispatch_event("change")
    page.wait_for_load_state("networkidle")
    rec.collect("/recipes/wizard/ (after a plan swap)")

    # The recipe page: the delete confirmation asks first (dismissed: nothing deleted).
    rec.visit("/recipes/qwen3-5-35b-max-single-user/", ".budget .seg")
    dialogs: list[str] = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.get_by_role("button", name="Delete recipe").click()
    page.wait_for_timeout(300)
    assert dialogs == ["Delete this recipe?"], dialogs
    assert page.url.endswith("/recipes/qwen3-5-35b-max-single-user/")
    rec.collect("recipe page (delete dismissed)")

    # The recipe form fetches its plan through htmx on load.
    rec.visit("/recipes/qwen3-5-35b-max-single-user/edit/", "#plan-preview .budget")
    rec.visit("/accounts/profile/", "h1")
    # Swagger UI: a 1.5 MB bundle, slow to start on a busy core.
    rec.visit("/api/v1/docs", ".swagger-ui .info .title", timeout=90_000)
    rec.visit("/admin/", "#content")

    # Chat: a new conversation, an answer streamed over the chat socket, with math (Temml
    # writes style attributes: display math's <math>, an accent, a matrix's cells).
    page.goto("/chat/")
    page.get_by_role("button", name="New chat").click()
    expect(page.locator("[data-chat-state]")).to_have_text("ready", timeout=15_000)
    page.get_by_label("Message").fill("/sparksim echo " + CHAT_ANSWER)
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".chat-assistant").last
    expect(answer.locator("[data-stats]")).to_contain_text("finish:", timeout=30_000)
    expect(answer.locator("[data-content]")).to_contain_text("under the policy")
    math = answer.locator("[data-rendered] math")
    expect(math).to_have_count(3)
    expect(answer.locator("[data-rendered] math[display=block] mtd")).to_have_count(4)
    expect(answer.locator("[data-rendered] [style]")).to_have_count(0)
    rec.collect("chat")

    assert not rec.seen, "CSP violations:\n" + "\n".join(rec.seen)


# --- math under the policy, without the live server --------------------------------------
# Temml writes part of its layout as style attributes, which style-src 'self' refuses as
# soon as any HTML parser meets them (DOMPurify's DOMParser too); static/js/markdown.js
# takes them out of Temml's markup and keeps the layout as classes.

MATH = {
    # Markdown with TeX → a selector that must match in the panel's render (the layout kept)
    "$$\nE = mc^2\n$$": "math.md-tml-block-math[display=block]",
    "$\\hat{x}$": "mover > mo.md-tml-depth-0",
    "$$\n\\begin{pmatrix}a&b\\\\c&d\\end{pmatrix}\n$$": "mtd.md-tml-pl-0.md-tml-pr-col",
    "$$\n\\begin{array}{c|c}a&b\\\\\\hline c&d\\end{array}\n$$": "mtd.md-tml-br-solid.md-tml-bb-solid",
    "$$\n\\begin{aligned}a&=b\\\\c&=d\\end{aligned}\n$$": "mtd.tml-left.md-tml-pr-0",
    "$$\n\\begin{cases}a & x\\\\b & y\\end{cases}\n$$": "mtd.md-tml-pl-1em",
    "$\\boxed{x}$": "mrow.md-tml-p-box.md-tml-b-box",
    "$$\nx \\tag{1}\n$$": "mtable.md-tml-w-full mtd.md-tml-p-0.md-tml-w-half",
    "$\\color{red}{y}$": "mi",  # its colour dropped, as before
}
MATH_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="/static/css/sparkpanel.css">
<link rel="stylesheet" href="/static/vendor/temml/Temml-Local.css">
<script src="/static/vendor/markdown-it/markdown-it.umd.min.js" defer></script>
<script src="/static/vendor/dompurify/purify.min.js" defer></script>
<script src="/static/vendor/temml/temml.min.js" defer></script>
<script src="/static/js/markdown.js" defer></script>
</head><body><div id="out" class="chat-md"></div></body></html>"""


class _Static(http.server.SimpleHTTPRequestHandler):
    """The repository's static/ and one page, every answer under the panel's policy."""

    def log_message(self, *args) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Content-Security-Policy",
                         "; ".join(f"{k} {v}" for k, v in DIRECTIVES.items()))  # fmt: skip
        super().end_headers()

    def do_GET(self) -> None:
        if self.path != "/math":
            return super().do_GET() if self.path.startswith("/static/") else self.send_error(404)
        body = MATH_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def static_server():
    handler = functools.partial(_Static, directory=str(ROOT))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_math_renders_under_the_policy_with_temmls_layout_as_classes(browser, static_server):
    context = browser.new_context(base_url=static_server)
    try:
        page = context.new_page()
        page.add_init_script(RECORDER)
        page.goto("/math")
        page.wait_for_function("window.SparkMarkdown && window.temml")
        # The control: Temml's own markup, parsed as it is, is refused (style-src-attr).
        page.evaluate("""() => { const t = document.createElement("template");
            t.innerHTML = window.temml.renderToString("x", {displayMode: true}); }""")
        page.wait_for_timeout(200)
        control = page.evaluate("window.__csp")
        assert control and control[0].startswith("style-src-attr"), control
        for tex, kept in MATH.items():
            page.evaluate("window.__csp = []")
            found = page.evaluate("""([tex, kept]) => {
                const out = document.getElementById("out");
                out.replaceChildren(window.SparkMarkdown.render(tex));
                return {math: out.querySelectorAll("math").length,
                        styled: out.querySelectorAll("[style]").length,
                        kept: out.querySelectorAll(kept).length};
            }""", [tex, kept])  # fmt: skip
            page.wait_for_timeout(100)
            assert page.evaluate("window.__csp") == [], tex
            assert found["math"] == 1 and found["styled"] == 0 and found["kept"] >= 1, (tex, found)
        # Display math is centred block math, as Temml's inline style made it.
        page.evaluate("""() => document.getElementById("out").replaceChildren(
            window.SparkMarkdown.render("$$\\nx\\n$$"))""")
        shown = page.evaluate("getComputedStyle(document.querySelector('#out math')).display")
        assert shown == "block math"
    finally:
        context.close()
