"""CORS on /v1 (issue 42): browser clients (Open WebUI's per-user Direct Connections) call
the gateway from their own origin with a person's key. Admins list the origins; the
gateway answers their preflights and names them on every answer, and no other origin's."""

from __future__ import annotations

import http.server
import threading

import httpx
import pytest
from django.core.exceptions import ValidationError

from apps.gateway.models import AllowedOrigin, normalize_origin
from tests.e2e.conftest import CHROMIUM_ARGS

pytestmark = pytest.mark.django_db(transaction=True)

PAGE_ORIGIN = "http://127.0.0.2:{port}"


@pytest.mark.parametrize(
    "given, stored",
    [
        ("https://OpenWebUI.lan/", "https://openwebui.lan"),
        ("http://10.0.0.5:3000", "http://10.0.0.5:3000"),
        ("http://chat.team.lan:80", "http://chat.team.lan"),
        ("https://[fd00::5]:8443", "https://[fd00::5]:8443"),
    ],
)
def test_an_origin_is_kept_as_a_browser_sends_it(given, stored):
    assert normalize_origin(given) == stored


@pytest.mark.parametrize(
    "bad", ["*", "openwebui.lan", "https://openwebui.lan/chat", "ftp://x.lan",
            "https://x.lan:99999", "http://x.lan?key=spg_1", "https://-x.lan", ""],
)  # fmt: skip
def test_anything_but_an_origin_is_refused_with_a_clear_error(bad):
    with pytest.raises(ValidationError, match=r"scheme://host|not a port"):
        normalize_origin(bad)
    with pytest.raises(ValidationError):
        AllowedOrigin(origin=bad).full_clean()


def _preflight(panel, origin: str, headers: str = "authorization, content-type"):
    return httpx.options(panel.v1 + "/chat/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": headers,
    })  # fmt: skip


def test_preflights_and_answers_name_only_the_allowed_origins(panel, replica, member,
                                                               gateway_key):  # fmt: skip
    _sim, run = replica()
    key = gateway_key(member)
    allowed, other = "http://openwebui.lan:3000", "http://evil.example"
    refused = _preflight(panel, allowed)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    assert refused.json()["error"]["code"] == "origin_not_allowed"

    AllowedOrigin.objects.create(origin=allowed, note="Open WebUI")  # no restart needed
    ok = _preflight(panel, allowed, "Authorization, Content-Type, X-Stainless-Lang")
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == allowed
    assert ok.headers["access-control-allow-headers"] == (
        "authorization, content-type, x-stainless-lang"
    )
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert ok.headers["vary"] == "Origin" and int(ok.headers["access-control-max-age"]) > 0
    assert "access-control-allow-credentials" not in ok.headers  # keys, never cookies
    # Header names that are not header names get the defaults only.
    odd = _preflight(panel, allowed, "authorization, bad header, x:y")
    assert odd.headers["access-control-allow-headers"] == "authorization, content-type"
    assert _preflight(panel, other).status_code == 403

    auth = {"Authorization": f"Bearer {key}"}
    answer = httpx.get(panel.v1 + "/models", headers={**auth, "Origin": allowed})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == allowed
    assert "retry-after" in answer.headers["access-control-expose-headers"]
    chat = httpx.post(panel.v1 + "/chat/completions", headers={**auth, "Origin": allowed},
                      json={"model": run.served_name, "max_tokens": 3,
                            "messages": [{"role": "user", "content": "Hi"}]}, timeout=60)  # fmt: skip
    assert chat.status_code == 200 and chat.headers["access-control-allow-origin"] == allowed
    # A refusal names the origin too, so the page can read why.
    unkeyed = httpx.get(panel.v1 + "/models", headers={"Origin": allowed})
    assert unkeyed.status_code == 401
    assert unkeyed.headers["access-control-allow-origin"] == allowed
    # Another origin's answer names none (the browser hides it from that page).
    foreign = httpx.get(panel.v1 + "/models", headers={**auth, "Origin": other})
    assert foreign.status_code == 200 and "access-control-allow-origin" not in foreign.headers
    # Without an Origin (curl, SDKs) nothing changes, and OPTIONS is no method of /v1.
    plain = httpx.get(panel.v1 + "/models", headers=auth)
    assert "access-control-allow-origin" not in plain.headers
    assert httpx.options(panel.v1 + "/models").status_code == 405

    AllowedOrigin.objects.filter(origin=allowed).delete()
    assert _preflight(panel, allowed).status_code == 403


def test_a_key_in_the_url_is_never_taken(panel, member, gateway_key):
    key = gateway_key(member)
    for query in (f"api_key={key}", f"key={key}", f"authorization=Bearer%20{key}"):
        answer = httpx.get(f"{panel.v1}/models?{query}")
        assert answer.status_code == 401, query


@pytest.fixture
def other_origin_page():
    """A page served from another origin (127.0.0.2), as Open WebUI would serve its own."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<!doctype html><title>another app</title><p>another app</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield PAGE_ORIGIN.format(port=server.server_address[1])
    server.shutdown()


FETCH = """async ([url, key, model]) => {
  try {
    const r = await fetch(url, {method: "POST", headers: {
      "Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify({model, max_tokens: 4, messages: [{role: "user", content: "Hi"}]})});
    const body = await r.json();
    return {status: r.status, text: body.choices ? body.choices[0].message.content : null};
  } catch (e) { return {error: String(e)}; }
}"""


@pytest.mark.e2e
def test_a_page_of_an_allowed_origin_chats_from_the_browser(panel, replica, member, gateway_key,
                                                            other_origin_page, chromium_path):  # fmt: skip
    """Real Chromium on a page of another origin calls /v1 with a person's key: refused at
    the preflight until an admin allows that origin, answered after."""
    from playwright.sync_api import sync_playwright

    _sim, run = replica()
    key = gateway_key(member)
    args = [panel.v1 + "/chat/completions", key, run.served_name]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(other_origin_page + "/")
            blocked = page.evaluate(FETCH, args)
            assert "Failed to fetch" in blocked.get("error", ""), blocked
            # Playwright's sync API runs a loop in this thread: the ORM goes to another one.
            admin = threading.Thread(target=AllowedOrigin.objects.create,
                                     kwargs={"origin": other_origin_page, "note": "the page"})  # fmt: skip
            admin.start()
            admin.join()
            done = page.evaluate(FETCH, args)
            assert done.get("status") == 200 and done.get("text"), done
        finally:
            browser.close()
