"""A spoofed X-Forwarded-For through a real nginx in front of uvicorn (issue 17, class 4),
and without one (issue 38).

The panel runs as deployed behind a TLS proxy: uvicorn started as `make run` starts it
(tools/devrun.py::web_argv) with `FORWARDED_ALLOW_IPS` set to the proxy's own address (here
nginx connects from 127.0.0.1), Debian's nginx in front with the `location /` block and
`map` of docs/deploy.md, word for word (only the upstream port differs). The client
connects to nginx from an address of its own (127.0.0.5, 127.0.0.6: any 127/8 address is
local) and claims, in its own `X-Forwarded-For`, addresses it does not have (10.x: never
connected to, only written in a header). nginx appends the client's real address; uvicorn
must take that one, never the client's leftmost claim.

Without a proxy (`FORWARDED_ALLOW_IPS` unset) no one's forwarding headers are believed:
uvicorn's own default trusts 127.0.0.1, so any local process or SSH-tunnelled user could
claim an address of its choosing (issue 38, finding 6). tools/container-start.sh follows
the same rule, checked with stand-ins for python and uvicorn.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sqlite3
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


def devrun():
    """tools/devrun.py, what `make run` runs (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("devrun_for_proxy", ROOT / "tools/devrun.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    # As make run starts the web (the trusted list from FORWARDED_ALLOW_IPS; the same flags
    # as tools/container-start.sh's), on loopback only.
    web = subprocess.Popen(devrun().web_argv(PROXY, upstream, env), cwd=ROOT, env=env,
                           stdout=log.open("w"), stderr=subprocess.STDOUT)  # fmt: skip
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


# --- make run without a proxy, and with one (issue 38, finding 6) ---------------------------

LOCAL = "127.0.0.1"  # a local process, or a user through an SSH tunnel to the panel's port
A_PROXY = "127.0.0.7"  # the only address FORWARDED_ALLOW_IPS lists
CLAIMED = "10.9.9.9"


def _failed_sign_in(url: str, source: str, username: str) -> None:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(base_url=url, transport=transport, timeout=30) as client:
        headers = {"X-Forwarded-For": CLAIMED}
        page = client.get("/accounts/login/", headers=headers)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert page.status_code == 200 and token, page.text[:300]
        answer = client.post("/accounts/login/", headers=headers, data={
            "username": username, "password": "wrong", "csrfmiddlewaretoken": token.group(1)})  # fmt: skip
        assert answer.status_code == 200, answer.text[:300]


def test_make_run_believes_forwarded_for_only_from_the_proxies_it_is_given(redis_url, tmp_path):
    """`make run`'s web server, started by tools/devrun.py's own argv: with
    FORWARDED_ALLOW_IPS unset a local client's `X-Forwarded-For: 10.9.9.9` is not believed
    (axes records the failed sign-in from 127.0.0.1); with it set to a proxy, that proxy's
    forwarded address is used and a local client's claim still is not."""
    db = tmp_path / "panel.sqlite3"
    base = child_env(DATABASE_URL=f"sqlite:///{db}", DEBUG="false", SPARKPANEL_VAR_DIR=str(tmp_path),
                     ALLOWED_HOSTS="127.0.0.1,localhost", AXES_ENABLED="true",
                     CHANNELS_PREFIX=f"proxy-{uuid.uuid4().hex[:8]}")  # fmt: skip
    base.pop("FORWARDED_ALLOW_IPS", None)
    manage("migrate", "--noinput", env=base)
    servers = {}
    try:
        for name, extra in (("unset", {}), ("set", {"FORWARDED_ALLOW_IPS": A_PROXY})):
            env, port = {**base, **extra}, free_port()
            argv = devrun().web_argv(LOCAL, port, env)
            log = tmp_path / f"{name}.log"
            servers[name] = (subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log.open("w"),
                                              stderr=subprocess.STDOUT), port, log)  # fmt: skip
        for proc, port, log in servers.values():
            wait_for(lambda port=port: _up(f"http://{LOCAL}:{port}"), 60,
                     f"make run's web server (log: {log})", proc)  # fmt: skip
        unset, proxied = (f"http://{LOCAL}:{servers[n][1]}" for n in ("unset", "set"))
        _failed_sign_in(unset, LOCAL, "local-without-proxy")
        _failed_sign_in(proxied, A_PROXY, "through-the-proxy")
        _failed_sign_in(proxied, LOCAL, "local-beside-the-proxy")
    finally:
        for proc, _port, _log in servers.values():
            stop_process(proc, timeout=15)
    with sqlite3.connect(db) as conn:
        seen = dict(conn.execute("SELECT username, ip_address FROM axes_accessattempt"))
    assert seen == {
        "local-without-proxy": LOCAL,  # was 10.9.9.9: uvicorn trusted 127.0.0.1 by default
        "through-the-proxy": CLAIMED,  # the configured proxy's forwarded address
        "local-beside-the-proxy": LOCAL,
    }


def _up(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code in (200, 503)
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("trusted", ["", "  ", "127.0.0.1, 172.18.0.1", A_PROXY])
def test_the_container_starts_uvicorn_with_the_same_proxy_rule(tmp_path, trusted):
    """tools/container-start.sh web, with python and uvicorn replaced by stand-ins that
    print their arguments: the proxy flags are devrun's for the same FORWARDED_ALLOW_IPS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python", "uvicorn"):
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\nprintf "{tool}"; printf " %s" "$@"; echo\n')
        stub.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if trusted:
        env["FORWARDED_ALLOW_IPS"] = trusted
    out = subprocess.run(["sh", str(ROOT / "tools/container-start.sh"), "web"], env=env,
                         capture_output=True, text=True, timeout=30, check=True).stdout  # fmt: skip
    [line] = [ln for ln in out.splitlines() if ln.startswith("uvicorn ")]
    argv = line.split()
    expected = devrun().proxy_flags(trusted)
    assert expected == (
        ["--proxy-headers", "--forwarded-allow-ips", trusted.replace(" ", "")]
        if trusted.strip() else ["--no-proxy-headers"]
    )  # fmt: skip
    at = argv.index(expected[0])
    assert argv[at : at + len(expected)] == expected, argv
    flags = {"--proxy-headers", "--no-proxy-headers", "--forwarded-allow-ips"}
    assert len([a for a in argv if a in flags]) == len([e for e in expected if e in flags]), argv
