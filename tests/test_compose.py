"""The compose files are valid and say what the Spark deployment needs (docs/deploy.md).

Only `docker-compose config` runs here: no image can be pulled or built on the test
machine, so the stack itself is not started (the README says so).
"""

import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

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
# What docs/deploy.md tells a second Spark to put in its .env.
SECOND_SPARK = {
    "SECRET_KEY": "k" * 60,
    "REDIS_PASSWORD": "redis-pw",
    "POSTGRES_PASSWORD": "pg-pw",
    "SPARK_NAME": "spark-2",
    "SERVICES_HOST": "10.88.0.1",
}
MAIN = "docker-compose.yml"
PROXY = "docker-compose.socket-proxy.yml"
LAN = "docker-compose.lan-services.yml"
SPARK_WORKER = "docker-compose.spark-worker.yml"
# Every supported way of combining the files, with the environment each needs.
STACKS = {
    (MAIN,): SECRETS,
    (MAIN, PROXY): SECRETS,
    (MAIN, LAN): {**SECRETS, "SERVICES_BIND": "10.88.0.1"},
    (MAIN, LAN, PROXY): {**SECRETS, "SERVICES_BIND": "10.88.0.1"},
    (SPARK_WORKER,): SECOND_SPARK,
    (SPARK_WORKER, PROXY): SECOND_SPARK,
}
# The socket proxy: what the worker needs, and sections that must never be on.
PROXY_ALLOWED = {"PING", "VERSION", "CONTAINERS", "IMAGES", "POST"}
PROXY_FORBIDDEN = {
    "EXEC", "VOLUMES", "NETWORKS", "SWARM", "SERVICES", "TASKS", "NODES", "SECRETS",
    "CONFIGS", "AUTH", "BUILD", "COMMIT", "PLUGINS", "SYSTEM", "SESSION", "DISTRIBUTION",
    "INFO", "EVENTS", "GRPC",
}  # fmt: skip
# Images whose upstream version is major.minor (PostgreSQL since 10): that is exact.
TWO_PART_VERSIONS = {"postgres"}


def _run_config(files: tuple[str, ...], env_overrides: dict[str, str], workdir):
    exe = shutil.which("docker-compose")
    require_service(exe is not None, "docker-compose (Debian package docker-compose)")
    # Whatever the files interpolate comes from the test, never from the developer's shell.
    interpolated = set()
    for path in ROOT.glob("docker-compose*.yml"):
        interpolated |= set(re.findall(r"\$\{([A-Z0-9_]+)", path.read_text()))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in interpolated and not k.startswith("COMPOSE_")
    }
    env.update(env_overrides)
    # Run from an empty directory so a developer's .env cannot leak into the result.
    args = [exe]
    for name in files:
        (workdir / name).write_text((ROOT / name).read_text())
        args += ["-f", str(workdir / name)]
    return subprocess.run(
        [*args, "config"], cwd=workdir, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def compose(tmp_path_factory):
    """compose(files, env) -> the merged config; each combination is run once."""
    cache: dict = {}

    def load(files: tuple[str, ...], env: dict[str, str]) -> dict:
        key = (files, tuple(sorted(env.items())))
        if key not in cache:
            result = _run_config(files, env, tmp_path_factory.mktemp("compose"))
            assert result.returncode == 0, result.stderr
            cache[key] = yaml.safe_load(result.stdout)
        return cache[key]

    return load


@pytest.fixture
def config(compose) -> dict:
    return compose((MAIN,), SECRETS)


def _ports(service: dict) -> list[tuple[str, str, str]]:
    """(host address, published port, container port) for short and long syntax."""
    out = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            out.append((port.get("host_ip", ""), str(port["published"]), str(port["target"])))
            continue
        parts = port.split("/")[0].rsplit(":", 2)
        out.append((parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", *parts[-2:]))
    return out


def _internal(config: dict) -> set[str]:
    return {name for name, net in config["networks"].items() if (net or {}).get("internal")}


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
    result = _run_config(
        (MAIN,), {k: v for k, v in SECRETS.items() if k != "REDIS_PASSWORD"}, tmp_path
    )
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


def test_every_compose_file_is_tested():
    # docker-compose.override.yml is a site's own file (compose loads it by itself).
    files = {path.name for path in ROOT.glob("docker-compose*.yml")}
    files.discard("docker-compose.override.yml")
    assert files == {name for stack in STACKS for name in stack}


@pytest.mark.parametrize("files", list(STACKS), ids="+".join)
def test_every_image_is_pinned_to_an_exact_version(compose, files):
    config = compose(files, STACKS[files])
    for name, service in config["services"].items():
        image = service.get("image")
        assert image, f"{name} names no image (a build must be tagged too)"
        repo, _, tag = image.partition("@")[0].rpartition(":")
        assert repo and "/" not in tag, f"{name}: {image} has no tag"
        assert "latest" not in tag, f"{name}: {image}"
        parts = 2 if repo.rsplit("/", 1)[-1] in TWO_PART_VERSIONS else 3
        exact = r"v?\d+" + r"\.\d+" * (parts - 1) + r"(-[a-z0-9.]+)?"
        assert re.fullmatch(exact, tag), f"{name}: {image} is not an exact version"
    for name in files:
        assert ":latest" not in (ROOT / name).read_text(), name


def test_the_panel_image_follows_sparkpanel_version(compose):
    config = compose((MAIN,), SECRETS)
    panel = {"web", "worker", "hostagent", "worker-default", "beat"}
    assert {config["services"][s]["image"] for s in panel} == {"sparkpanel:0.1.0"}
    config = compose((MAIN,), {**SECRETS, "SPARKPANEL_VERSION": "0.2.3"})
    assert {config["services"][s]["image"] for s in panel} == {"sparkpanel:0.2.3"}


def test_redis_and_postgres_are_only_on_the_internal_network(config):
    internal = _internal(config)
    assert internal, "no network has internal: true"
    for name in ("redis", "postgres"):
        service = config["services"][name]
        assert not service.get("ports"), name
        assert set(service["networks"]) <= internal, name
    # The panel's containers reach them there, and the outside (vLLM, webhooks) on `lan`.
    for name in ("web", "worker", "hostagent", "worker-default"):
        networks = set(config["services"][name]["networks"])
        assert networks & internal and networks - internal, name
    assert set(config["services"]["beat"]["networks"]) <= internal
    # Only the web publishes a port.
    published = {name for name, s in config["services"].items() if s.get("ports")}
    assert published == {"web"}
    assert _ports(config["services"]["web"])[0][2] == "8000"


def test_web_healthcheck_names_an_allowed_host():
    """The probe must pass Django's ALLOWED_HOSTS check (a bare 127.0.0.1 gets 400) and the
    https redirect: run it against a stub that answers like the panel."""
    compose_text = yaml.safe_load((ROOT / MAIN).read_text())
    probe = compose_text["services"]["web"]["healthcheck"]["test"][-1]
    seen = {}

    class Panel(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.update(host=self.headers["Host"], proto=self.headers["X-Forwarded-Proto"])
            ok = self.path == "/healthz" and self.headers["Host"] == "spark-panel.lan"
            self.send_response(200 if ok else 400)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Panel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = str(server.server_address[1])
        env = {**os.environ, "ALLOWED_HOSTS": "spark-panel.lan,10.0.0.5"}
        result = subprocess.run(
            [sys.executable, "-c", probe.replace("127.0.0.1:8000", f"127.0.0.1:{port}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert seen == {"host": "spark-panel.lan", "proto": "https"}


def test_lan_services_publish_redis_and_postgres_only_on_services_bind(compose):
    config = compose((MAIN, LAN), STACKS[(MAIN, LAN)])
    expected = {"redis": "6379", "postgres": "5432"}
    for name, container_port in expected.items():
        ports = _ports(config["services"][name])
        assert ports == [("10.88.0.1", container_port, container_port)], name
    # Still password-protected, never trust authentication.
    command = config["services"]["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "redis-pw"
    postgres = config["services"]["postgres"]["environment"]
    assert postgres["POSTGRES_PASSWORD"] == "pg-pw"
    assert postgres.get("POSTGRES_HOST_AUTH_METHOD", "scram-sha-256") not in ("trust", "md5")
    published = {name for name, s in config["services"].items() if s.get("ports")}
    assert published == {"web", "redis", "postgres"}


def test_lan_services_refuse_to_publish_without_an_address(tmp_path):
    result = _run_config((MAIN, LAN), SECRETS, tmp_path)
    assert result.returncode != 0
    assert "set SERVICES_BIND in .env" in result.stderr


@pytest.mark.parametrize("files", [(MAIN, PROXY), (SPARK_WORKER, PROXY)], ids="+".join)
def test_socket_proxy_exposes_only_what_the_worker_needs(compose, files):
    config = compose(files, STACKS[files])
    proxy = config["services"]["socket-proxy"]
    env = {k: str(v).strip().lower() for k, v in proxy["environment"].items()}
    on = {k for k, v in env.items() if v not in ("0", "", "false")}
    assert on == PROXY_ALLOWED
    assert not (on & PROXY_FORBIDDEN)
    assert not proxy.get("ports") and not proxy.get("expose")
    assert set(proxy["networks"]) <= _internal(config)
    assert any(
        v.startswith("/var/run/docker.sock:/var/run/docker.sock:ro") for v in proxy["volumes"]
    )
    # Nothing else holds the host's Docker socket; the worker and agent are not root.
    for name, service in config["services"].items():
        if name == "socket-proxy":
            continue
        sources = [v.split(":")[0] for v in service.get("volumes", [])]
        assert "/var/run/docker.sock" not in sources, name
    for name in ("worker", "hostagent"):
        service = config["services"][name]
        assert service.get("user") not in (None, "root", "0"), name
        assert set(service["networks"]) & set(proxy["networks"]), name


def test_spark_worker_runs_only_worker_and_hostagent_against_the_first_spark(compose):
    config = compose((SPARK_WORKER,), SECOND_SPARK)
    assert set(config["services"]) == {"worker", "hostagent"}
    for name, service in config["services"].items():
        env = service["environment"]
        assert env["SPARK_NAME"] == "spark-2", name
        assert env["REDIS_URL"] == "redis://:redis-pw@10.88.0.1:6379/0", name
        assert env["DATABASE_URL"] == "postgres://sparkpanel:pg-pw@10.88.0.1:5432/sparkpanel", name
        assert any(
            v.startswith("/var/run/docker.sock:/var/run/docker.sock") for v in service["volumes"]
        )
        assert not service.get("ports") and not service.get("depends_on"), name
        assert not service.get("privileged") and service.get("network_mode") != "host", name
    assert config["services"]["worker"]["command"] == ["worker"]
    assert config["services"]["hostagent"]["command"] == ["hostagent"]


def test_spark_worker_refuses_to_start_without_the_first_sparks_address(tmp_path):
    env = {k: v for k, v in SECOND_SPARK.items() if k != "SERVICES_HOST"}
    result = _run_config((SPARK_WORKER,), env, tmp_path)
    assert result.returncode != 0
    assert "set SERVICES_HOST in .env" in result.stderr


def test_the_worker_sees_the_sparks_hugging_face_cache_at_its_own_path(compose):
    """The worker downloads weights into the host's cache path and vLLM's containers mount
    that same path from the Spark: the worker must see it at the same place."""
    for files, env in (((MAIN,), SECRETS), ((SPARK_WORKER,), SECOND_SPARK)):
        for cache_dir in (None, "/data/hf"):
            extra = {} if cache_dir is None else {"HF_CACHE_DIR": cache_dir}
            worker = compose(files, {**env, **extra})["services"]["worker"]
            expected = cache_dir or "/srv/huggingface"
            assert f"{expected}:{expected}" in [v.rsplit(":rw", 1)[0] for v in worker["volumes"]]
