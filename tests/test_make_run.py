"""`make run`'s supervisor really starts the whole panel and Ctrl-C really stops it all."""

import signal
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest
from django.core.management import call_command

from tests.conftest import ROOT, child_env, free_port, manage, wait_for

pytestmark = pytest.mark.services


def test_devrun_serves_the_login_page_and_ctrl_c_stops_every_process(tmp_path, redis_url):
    # A Redis URL nobody answers on: devrun must start its own private instance there.
    redis_port, web_port = free_port(), free_port()
    env = child_env(
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
        SPARKPANEL_VAR_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'run.sqlite3'}",
        HOST="127.0.0.1",
        PORT=str(web_port),
    )
    env.pop("ALLOWED_HOSTS", None)
    manage("migrate", "--noinput", env=env)
    proc = subprocess.Popen(
        [sys.executable, "tools/devrun.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("SparkPanel is running at" in ln for ln in lines), 90, "devrun", proc)
        page = httpx.get(f"http://127.0.0.1:{web_port}/accounts/login/", timeout=5)
        assert page.status_code == 200
        assert "Sign in" in page.text
        started = psutil.Process(proc.pid).children(recursive=True)

        def cmdline(p: psutil.Process) -> str:
            try:
                return " ".join(p.cmdline())
            except psutil.Error:  # a short-lived helper that just exited (a zombie)
                return ""

        names = " ".join(cmdline(p) for p in started)
        for part in (
            "redis-server",
            "uvicorn",
            "worker",
            "beat",
            "hostagent --host local-sim --wait",
        ):
            assert part in names, f"{part} not started: {names}"
    finally:
        proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers
        code = proc.wait(timeout=60)
        reader.join(timeout=5)
    assert code == 0, "".join(lines[-40:])
    time.sleep(0.5)
    alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running after Ctrl-C: {[p.cmdline() for p in alive]}"
    assert any("all processes stopped" in ln for ln in lines)


def test_seed_demo_creates_the_admin_once_and_prints_its_password_once(db, capsys):
    call_command("seed_demo")
    first = capsys.readouterr().out
    assert "username: admin" in first
    password = first.split("password: ")[1].split()[0]
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    assert admin.check_password(password) and admin.is_superuser
    call_command("seed_demo")
    again = capsys.readouterr().out
    assert "already exists" in again
    assert password not in again
