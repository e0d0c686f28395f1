"""A run's page tells a person how to call its model (issue 43): the team endpoint and the
model name, a curl command and a Python snippet — and both, taken from the page as they
are, answer through the panel's real gateway with the person's own gateway key. The
Spark's own server refuses that key."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys

import httpx
import pytest

from tests.gateway.conftest import SIM_ARGS
from tests.gateway.fixtures import Panel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("redis_url")]


def _snippets(page: str) -> list[str]:
    return [
        html.unescape(code)
        for code in re.findall(r'<pre class="command"><code>(.*?)</code>', page, re.S)
    ]


def test_the_pages_curl_and_python_snippets_answer_through_the_team_endpoint(
    panel: Panel, keyed_sim, qwen, member, gateway_key, tmp_path
):
    _sim, run = keyed_sim(qwen, *SIM_ARGS)
    key = gateway_key(member)
    browser = httpx.Client(base_url=panel.url, timeout=30)
    page = _signed_in(browser, member).get(f"/runs/{run.pk}/").text
    use = page.split('id="use-it"')[1].split("</section>")[0]
    assert f"<code>{panel.v1}</code>" in use and f"<code>{qwen.public_name}</code>" in use
    curl, python = _snippets(use)[:2]

    env = {"PATH": os.environ["PATH"], "SPARKPANEL_KEY": key}
    answered = subprocess.run(["bash", "-c", curl + " --fail --silent --show-error"],
                              capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert '"choices"' in answered.stdout

    script = tmp_path / "hello.py"
    script.write_text(python.replace("<your gateway key>", key), encoding="utf-8")
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip()

    # The Spark's own server is the panel's alone: a person's key is refused there.
    direct = httpx.post(f"{run.endpoint}/v1/chat/completions", timeout=10,
                        headers={"Authorization": f"Bearer {key}"},
                        json={"model": qwen.public_name, "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert direct.status_code == 401


def _signed_in(client: httpx.Client, user) -> httpx.Client:
    from tests.conftest import PASSWORD

    client.get("/accounts/login/")
    done = client.post("/accounts/login/", data={
        "username": user.get_username(), "password": PASSWORD,
        "csrfmiddlewaretoken": client.cookies["csrftoken"]})  # fmt: skip
    assert done.status_code == 302, done.text[:300]
    return client
