"""Settings come from the environment, with safe defaults and a deployable production set."""

import os
import stat
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from sparkpanel.env import ImproperlyConfiguredEnv, env_bool, env_int, load_dotenv, secret_key
from tests.conftest import ROOT


def test_env_bool_accepts_the_usual_spellings_and_rejects_garbage(monkeypatch):
    monkeypatch.setenv("FLAG", "Yes")
    assert env_bool("FLAG") is True
    monkeypatch.setenv("FLAG", "off")
    assert env_bool("FLAG", True) is False
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ImproperlyConfiguredEnv, match="FLAG='maybe' is not a boolean"):
        env_bool("FLAG")


def test_env_int_names_the_variable_on_error(monkeypatch):
    monkeypatch.setenv("N", "12x")
    with pytest.raises(ImproperlyConfiguredEnv, match="N='12x' is not an integer"):
        env_int("N", 1)


def test_dotenv_never_overrides_the_real_environment(tmp_path, monkeypatch):
    env_file = tmp_path / ".env"
    env_file.write_text("# comment\nexport A_VAR='from file'\nB_VAR=file\n")
    monkeypatch.setenv("B_VAR", "real")
    monkeypatch.delenv("A_VAR", raising=False)
    load_dotenv(env_file)
    assert os.environ["A_VAR"] == "from file"
    assert os.environ["B_VAR"] == "real"
    monkeypatch.delenv("A_VAR")


def test_secret_key_is_generated_once_into_a_private_file(tmp_path, monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    first = secret_key(tmp_path)
    assert len(first) >= 50
    assert secret_key(tmp_path) == first
    mode = stat.S_IMODE((tmp_path / "secret_key").stat().st_mode)
    assert mode == 0o600
    monkeypatch.setenv("SECRET_KEY", "from-env")
    assert secret_key(tmp_path) == "from-env"


def test_sqlite_runs_in_wal_mode_with_immediate_transactions(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite-specific")
    assert settings.DATABASES["default"]["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert "journal_mode=WAL" in settings.DATABASES["default"]["OPTIONS"]["init_command"]


def test_celery_is_configured_for_one_task_at_a_time_and_safe_redelivery():
    from sparkpanel.celery import app, host_queue

    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    # A Redis blip must not kill a running benchmark or model load (tests/faults).
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is False
    assert conf.task_default_queue == "default"
    # Redis must not hand a message to a second worker while the first may still run it.
    assert conf.broker_transport_options["visibility_timeout"] > conf.task_time_limit
    assert conf.broker_url == settings.REDIS_URL
    assert host_queue("spark-1") == "host.spark-1"
    with pytest.raises(ValueError, match="invalid host name"):
        host_queue("Spark 1; rm -rf")


def _check_deploy(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "p" * 10 + "x9Yq2LmZ7rT4vB8nW1sK6dF3hJ0gC5aE-_u!@#$%^&*()=+",
    "ALLOWED_HOSTS": "spark-panel.lan",
    "HTTPS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}


def test_check_deploy_passes_with_the_documented_production_values():
    result = _check_deploy(PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_deploy_catches_debug_in_production():
    result = _check_deploy({**PRODUCTION, "DEBUG": "true"})
    assert result.returncode != 0
    assert "DEBUG" in result.stdout + result.stderr


def test_env_example_documents_every_variable_settings_read():
    import re

    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M)
    )
    sources = (ROOT / "sparkpanel" / "settings.py").read_text() + (
        ROOT / "tools" / "devrun.py"
    ).read_text()
    read = set(re.findall(r'env_(?:str|bool|int|list|secret)\(\s*"([A-Z0-9_]+)"', sources))
    read.add("SECRET_KEY")
    missing = read - documented
    assert not missing, f".env.example does not document: {sorted(missing)}"
