"""Fault 7 on PostgreSQL (the compose setup's database): the server restarts while the
panel is in use. Requests made while it is down fail visibly — a 503 page or JSON that says
nothing was saved — and never half-write; once it is back, the panel reconnects by itself
and the next write is saved.

A private PostgreSQL cluster (initdb in a temporary directory, a free port on 127.0.0.1)
and the panel's real request stack (Django's test client in a `manage.py shell` process
whose DATABASE_URL points at that cluster).
"""

import glob
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import child_env, free_port, manage, require_service

pytestmark = pytest.mark.services

SCRIPT = r"""
import json, os, subprocess
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import close_old_connections
from django.test import Client
from apps.accounts.roles import Role
from apps.accounts.services import user_set_role
from apps.core.models import Notice

call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("otto", password="x" * 20)
user_set_role(user=user, role=Role.OPERATOR)
client = Client(raise_request_exception=False)
client.force_login(user)
pg = json.loads(os.environ["PG_CTL"])
out = {}

def post(message):
    # What the real handlers do at every request start and end (the test client does not):
    # drop a connection that broke, so the request gets a fresh one.
    close_old_connections()
    return client.post("/notices/", {"message": message, "level": "info"})

out["before"] = post("before the restart").status_code
subprocess.run(pg["stop"], check=True, capture_output=True)
down = post("while it is down")
out["down"] = [down.status_code, down.get("Retry-After"), b"nothing was saved" in down.content]
close_old_connections()
api = client.get("/api/v1/me")
out["api_down"] = [api.status_code, api.json()["error"]["code"] if api.status_code == 503 else None]
subprocess.run(pg["start"], check=True, capture_output=True)
out["after"] = post("after the restart").status_code
close_old_connections()
out["notices"] = sorted(Notice.objects.values_list("message", flat=True))
print("RESULT " + json.dumps(out))
"""


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: p.split("/")[4])
    return Path(found[-1]).parent if found else None


def test_a_postgresql_restart_is_a_visible_503_then_the_panel_reconnects(tmp_path):
    bindir = _pg_bin()
    require_service(bindir is not None, "PostgreSQL's server (Debian package postgresql)")
    # PostgreSQL refuses to run as root: as root, the cluster belongs to `postgres`.
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="sparkpanel-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if as_user:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    pg_ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-w", "-t", "30"]
    options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "panel",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)  # fmt: skip
        subprocess.run([*pg_ctl, "-o", options, "-l", str(base / "pg.log"), "start"],
                       check=True, capture_output=True)  # fmt: skip
        env = child_env(
            DATABASE_URL=f"postgres://panel@127.0.0.1:{port}/postgres",
            ALLOWED_HOSTS="testserver",
            SPARKPANEL_VAR_DIR=str(tmp_path),
            PG_CTL=json.dumps({
                "stop": [*pg_ctl, "-m", "fast", "stop"],
                "start": [*pg_ctl, "-o", options, "-l", str(base / "pg.log"), "start"],
            }),
        )  # fmt: skip
        out = manage("shell", "-c", SCRIPT, env=env)
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["before"] == 302
    assert result["down"] == [503, "5", True]
    assert result["api_down"] == [503, "database_unavailable"]
    assert result["after"] == 302  # reconnected by itself
    assert result["notices"] == ["after the restart", "before the restart"]  # nothing half-saved
