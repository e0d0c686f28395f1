"""docker-compose.yml is valid and says what the Spark deployment needs.

Only `docker-compose config` runs here: no image can be pulled or built on the test
machine, so the stack itself is not started (the README says so).
"""

import os
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT, require_service

SECRETS = {
    "SECRET_KEY": "k" * 60,
    "ALLOWED_HOSTS": "spark-panel.lan",
    "REDIS_PASSWORD": "redis-pw",
    "POSTGRES_PASSWORD": "pg-pw",
    "SPARK_NAME": "spark-1",
}


def _config(env_overrides: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    require_service(exe is not None, "docker-compose (Debian package docker-compose)")
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env.update(env_overrides)
    # Run from an empty directory so a developer's .env cannot leak into the result.
    compose = tmp_path / "docker-compose.yml"
    compose.write_text((ROOT / "docker-compose.yml").read_text())
    return subprocess.run(
        [exe, "-f", str(compose), "config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def config(tmp_path) -> dict:
    result = _config(SECRETS, tmp_path)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_has_the_spark_services(config):
    assert {"redis", "postgres", "web", "worker", "hostagent", "beat"} <= set(config["services"])
    assert config["services"]["hostagent"]["command"] == ["hostagent"]


def test_redis_has_a_password_never_evicts_and_persists_queued_jobs(config):
    command = config["services"]["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "redis-pw"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--appendonly") + 1] == "yes"


def test_worker_serves_its_sparks_queue_with_the_docker_socket(config):
    worker = config["services"]["worker"]
    assert worker["command"] == ["worker"]
    assert worker["environment"]["SPARK_NAME"] == "spark-1"
    assert any(v.startswith("/var/run/docker.sock:/var/run/docker.sock") for v in worker["volumes"])
    assert worker["environment"]["REDIS_URL"] == "redis://:redis-pw@redis:6379/0"
    assert worker["environment"]["DATABASE_URL"].startswith("postgres://")
    # The panel container itself never runs privileged or in the host's namespaces.
    for name, service in config["services"].items():
        assert not service.get("privileged"), name
        assert service.get("network_mode") != "host", name
        assert service.get("pid") != "host", name


def test_missing_secret_is_refused_with_a_clear_message(tmp_path):
    result = _config({k: v for k, v in SECRETS.items() if k != "REDIS_PASSWORD"}, tmp_path)
    assert result.returncode != 0
    assert "set REDIS_PASSWORD in .env" in result.stderr


def test_worker_entrypoint_refuses_to_start_without_a_spark_name():
    env = {k: v for k, v in os.environ.items() if k != "SPARK_NAME"}
    result = subprocess.run(
        ["sh", str(ROOT / "tools" / "container-start.sh"), "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert "set SPARK_NAME" in result.stderr
