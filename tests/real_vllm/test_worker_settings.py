"""How a Spark's worker runs vLLM comes from its environment, not from a recipe: the
settings read VLLM_EXECUTABLE, VLLM_ENV and VLLM_CONTAINER_VENV, and engine_for hands them
to the engines (no real vLLM needed here; tests/real_vllm/test_panel_*.py run it)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import child_env, manage, require_service
from tests.real_vllm import fixtures as real

SCRIPT = """
import json
from django.conf import settings
from apps.hosts.engines import engine_for
from apps.hosts.models import Host
process = engine_for(Host(name="p", engine="process", simulated=False))
print(json.dumps({"executable": settings.VLLM_EXECUTABLE, "env": settings.VLLM_ENV,
                  "venv": settings.VLLM_CONTAINER_VENV,
                  "command": process.command(["vllm", "serve", "a/b",
                                              "--gpu-memory-utilization", "0.5"]),
                  "server_env": process.server_env}))
"""


def test_the_worker_environment_names_the_vllm_and_its_environment(tmp_path):
    env = child_env(
        VLLM_EXECUTABLE="/opt/vllm/bin/vllm",
        VLLM_ENV="HF_HUB_OFFLINE=1, VLLM_CPU_KVCACHE_SPACE=4",
        VLLM_CONTAINER_VENV="/opt/vllm",
        SPARKPANEL_VAR_DIR=str(tmp_path),
    )
    out = json.loads(manage("shell", "-c", SCRIPT, env=env).strip().splitlines()[-1])
    assert out["executable"] == "/opt/vllm/bin/vllm" and out["venv"] == "/opt/vllm"
    assert out["env"] == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "4"}
    assert out["command"] == [
        "/opt/vllm/bin/vllm",
        "serve",
        "a/b",
        "--gpu-memory-utilization",
        "0.5",
    ]
    assert out["server_env"] == out["env"]


@pytest.mark.parametrize("bad", ["HF_TOKEN=hf_x", "NOEQUALS", "1X=2"])
def test_a_malformed_vllm_env_is_refused_at_start(bad, tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
        env=child_env(VLLM_ENV=bad, SPARKPANEL_VAR_DIR=str(tmp_path)), timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "VLLM_ENV" in proc.stderr


def test_the_mounted_venv_brings_its_own_python(tmp_path):
    require_service(real.available(), f"real vLLM ({real.VLLM_EXECUTABLE})")
    from apps.hosts.engines.docker import MountedVllm

    mounted = MountedVllm.from_venv(str(real.VENV))
    home = next(line.split("=", 1)[1].strip() for line in
                (real.VENV / "pyvenv.cfg").read_text().splitlines() if line.startswith("home"))  # fmt: skip
    assert str(real.VENV.resolve()) in mounted.paths and any(
        home.startswith(p) for p in mounted.paths
    )
    assert mounted.executable == f"{real.VENV.resolve()}/bin/vllm"  # where it really lies
