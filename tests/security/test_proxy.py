"""A spoofed X-Forwarded-For through a real nginx in front of uvicorn (issue 17, class 4).

The panel runs as deployed behind a TLS proxy: uvicorn with its proxy headers on and
`FORWARDED_ALLOW_IPS` set to the proxy's own address (here nginx connects from 127.0.0.1),
Debian's nginx in front with the `location /` block and `map` of docs/deploy.md, word for
word (only the upstream port differs). The client connects to nginx from an address of its
own (127.0.0.5, 127.0.0.6: any 127/8 address is local) and claims, in its own
`X-Forwarded-For`, addresses it does not have (10.x: never connected to, only written in a
header). nginx appends the client's real address; uvicorn must take that one, never the
client's leftmost claim.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    PASSWORD,
    ROOT,
    child_env,
    free_port,
    manage,
    require_service,
    stop_process,
    wait_for,
)

PROXY = "127.0.0.1"  # where nginx connects to uvicorn from: the trusted proxy
NGINX_ADDR = "127.0.0.2"  # where nginx listens
CLIENT = "127.0.0.5"  # the client's real address
OTHER_CLIENT = "127.0.0.6"  # another real client: the positive control
SPOOFED = "10.1.2.3"  # claimed in a header only
FAILURE_LIMIT = 3
METRICS_NETWORKS = f"10.0.0.0/8,{OTHER_CLIENT}/32"  # the spoofed address, not the client's
USERNAME = "pia"


@dataclass
class Panel:
    url: str  # through nginx
    env: dict[str, str]
    log: Path

    def client(self, source: str) -> httpx.Client:
        """An HTTP client whose connections come from `source` (a loopback address)."""
        transport = httpx.HTTPTransport(local_address=source)
        return httpx.Client(base_url=self.url, transport=transport, timeout=30)

    def shell(self, code: str) -> str:
        return manage("shell", "-c", code, env=self.env)


def documented_nginx() -> tuple[str, str]:
    """The `map` and the `location /` block of docs/deploy.md's nginx example."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = re.search(r"```nginx\n(.*?)```", text, re.S)
    assert block, "docs/deploy.md has no nginx example"
    conf = block.group(1)
    mapping = re.search(r"^map .*?^}", conf, re.S | re.M)
    location = re.search(r"^    location / \{.*?^    \}", conf, re.S | re.M)
    assert mapping and location, "docs/deploy.md's nginx example lost its map or location /"
    assert "$proxy_add_x_forwarded_for" in location.group(0)
    return mapping.group(0), location.group(0)


def nginx_conf(tmp: Path, port: int, upstream: int) -> Path:
    mapping, location = documented_nginx()
    assert "http://127.0.0.1:8000" in location
    location = location.replace("http://127.0.0.1:8000", f"http://{PROXY}:{upstream}")
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir()
    conf = tmp / "nginx.conf"
    conf.write_text(f"""
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
{mapping}
    server {{
        listen {NGINX_ADDR}:{port};
        server_name panel.test;
{location}
    }}
}}
""")
    return conf


@pytest.fixture(scope="module")
def nginx_bin() -> str:
    path = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    require_service(path is not None, "Debian's nginx (/usr/sbin/nginx)")
    return path


@pytest.fixture(scope="module")
def panel(redis_url, nginx_bin, tmp_path_factory) -> Iterator[Panel]:
    tmp = tmp_path_factory.mktemp("proxy")
    env = child_env(
        DATABASE_URL=f"sqlite:///{tmp / 'panel.sqlite3'}",
        DEBUG="false",
        ALLOWED_HOSTS=f"127.0.0.1,{NGINX_ADDR},localhost",
        CHANNELS_PREFIX=f"proxy-{uuid.uuid4().hex[:8]}",
        SPARKPANEL_VAR_DIR=str(tmp),
        # As docs/deploy.md says: the proxy's own address, never `*`.
        FORWARDED_ALLOW_IPS=PROXY,
        METRICS_TOKEN="",
        METRICS_ALLOWED_NETWORKS=METRICS_NETWORKS,
        LOGIN_FAILURE_LIMIT=str(FAILURE_LIMIT),
        AXES_ENABLED="true",
    )
    manage("migrate", "--noinput", env=env)
    manage("createuser", USERNAME, "--role", "member", "--password-stdin",
           env=env, stdin=PASSWORD + "\n")  # fmt: skip
    upstream, port = free_port(), free_port()
    log = tmp / "server.log"
    # As tools/container-start.sh starts the web (--proxy-headers, the trusted list from
    # FORWARDED_ALLOW_IPS), on loopback only.
    web = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "sparkpanel.asgi:application", "--host", PROXY,
         "--port", str(upstream), "--proxy-headers", "--forwarded-allow-ips",
         env["FORWARDED_ALLOW_IPS"]],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    nginx_dir = tmp / "nginx"
    nginx_dir.mkdir()
    conf = nginx_conf(nginx_dir, port, upstream)
    proxy = subprocess.Popen(
        [nginx_bin, "-p", str(nginx_dir), "-c", str(conf), "-e", str(nginx_dir / "error.log")],
        stdout=(nginx_dir / "stdout.log").open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    panel = Panel(url=f"http://{NGINX_ADDR}:{port}", env=env, log=log)

    def healthy() -> bool:
        try:
            with panel.client(CLIENT) as client:
                return client.get("/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(lambda: web.poll() is None and healthy(), 60,
                 f"the panel behind nginx (logs: {log}, {nginx_dir})", proxy)  # fmt: skip
        yield panel
    finally:
        stop_process(proxy, timeout=10)
        stop_process(web, timeout=15)


def sign_in(client: httpx.Client, password: str, spoof: str | None) -> httpx.Response:
    headers = {"X-Forwarded-For": spoof} if spoof else {}
    page = client.get("/accounts/login/", headers=headers)
    assert page.status_code == 200, page.text[:500]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "no CSRF token on the sign-in page"
    return client.post(
        "/accounts/login/",
        data={"username": USERNAME, "password": password, "csrfmiddlewaretoken": token.group(1)},
        headers=headers,
    )


def test_spoofed_forwarded_for_does_not_escape_the_login_lockout(panel):
    with panel.client(CLIENT) as attacker:
        for n in range(FAILURE_LIMIT + 2):  # a new claimed address for every guess
            answer = sign_in(attacker, "wrong-password", spoof=f"10.1.2.{n + 3}")
            assert answer.status_code in (200, 429), answer.status_code
        # Locked out: the right password, under yet another claimed address, is refused.
        answer = sign_in(attacker, PASSWORD, spoof=SPOOFED)
        assert answer.status_code == 429, (answer.status_code, answer.text[:300])
        assert "Too many failed sign-ins" in answer.text
    # The positive control: the lockout is the (user, real address) pair's, so the same user
    # from another real address still signs in.
    with panel.client(OTHER_CLIENT) as teammate:
        answer = sign_in(teammate, PASSWORD, spoof=SPOOFED)
        assert answer.status_code == 302, (answer.status_code, answer.text[:300])
        assert teammate.cookies.get("sessionid")
    # What axes recorded: the clients' real addresses, never a claimed one.
    assert recorded(panel, "AccessAttempt") == [CLIENT]  # the failures
    assert recorded(panel, "AccessLog") == [OTHER_CLIENT]  # the sign-in


def recorded(panel: Panel, model: str) -> list[str]:
    out = panel.shell(
        f"import json; from axes.models import {model}\n"
        f"print('ADDRESSES', json.dumps(sorted({{a.ip_address for a in {model}.objects.all()}})))"
    )
    line = next(line for line in out.splitlines() if line.startswith("ADDRESSES "))
    return json.loads(line.removeprefix("ADDRESSES "))


def test_spoofed_forwarded_for_does_not_pass_the_metrics_allowlist(panel):
    with panel.client(CLIENT) as outsider:
        # The allowlist holds 10.0.0.0/8 (the claim), not 127.0.0.5 (the client).
        for spoof in (SPOOFED, f"{SPOOFED}, {OTHER_CLIENT}", OTHER_CLIENT):
            answer = outsider.get("/metrics", headers={"X-Forwarded-For": spoof})
            assert answer.status_code == 403, (spoof, answer.status_code)
    # The positive control: an allowed real address, seen through nginx, is let in.
    with panel.client(OTHER_CLIENT) as scraper:
        answer = scraper.get("/metrics", headers={"X-Forwarded-For": "192.0.2.9"})
        assert answer.status_code == 200, answer.text[:300]
        assert "sparkpanel_runs" in answer.text


@pytest.mark.parametrize("trusted", ["*", "127.0.0.1, *", "0.0.0.0/0", "127.0.0.1,::/0"])
def test_wildcard_forwarded_allow_ips_is_refused_at_startup(tmp_path, trusted):
    """`*` (or a /0) would make uvicorn believe the client's own leftmost entry."""
    env = child_env(SPARKPANEL_VAR_DIR=str(tmp_path), FORWARDED_ALLOW_IPS=trusted,
                    DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")  # fmt: skip
    proc = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode != 0
    assert "FORWARDED_ALLOW_IPS" in proc.stderr and "docs/deploy.md" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_docs_and_compose_never_recommend_a_wildcard():
    for path in (
        "docs/deploy.md",
        "docker-compose.yml",
        ".env.example",
        "tools/container-start.sh",
    ):
        text = (ROOT / path).read_text()
        assert not re.search(r"FORWARDED_ALLOW_IPS[=:]\s*[\"']?\*", text), path
        assert "forwarded-allow-ips '*'" not in text and 'forwarded-allow-ips "*"' not in text
