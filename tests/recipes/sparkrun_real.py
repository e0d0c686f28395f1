"""Run the real sparkrun 0.4.2 (tools/sparkrun_env.sh installs it) over recipe files: its own
`Recipe.load` and vLLM runtimes' `generate_command`, as `sparkrun run --solo` renders a
recipe, in one subprocess per call."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import require_service

STORE = Path(
    os.environ.get("SPARKPANEL_VLLM_STORE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkpanel" / "venvs"
)
PYTHON = STORE / "sparkrun-0.4.2" / "bin" / "python"

CHILD = r"""
import json, logging, sys
from pathlib import Path
logging.disable(logging.CRITICAL)
from sparkrun.core.recipe import Recipe
from sparkrun.runtimes.vllm_distributed import VllmDistributedRuntime
from sparkrun.runtimes.vllm_ray import VllmRayRuntime
from sparkrun.runtimes.eugr_vllm_ray import EugrVllmRayRuntime
RT = {"vllm-distributed": VllmDistributedRuntime, "vllm-ray": VllmRayRuntime,
      "eugr-vllm": EugrVllmRayRuntime}
out = {}
for path in json.load(sys.stdin):
    try:
        recipe = Recipe.load(Path(path), offline=True)
        out[path] = {"runtime": recipe.runtime,
                     "command": RT[recipe.runtime]().generate_command(recipe, {}, is_cluster=False)}
    except Exception as exc:
        out[path] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def sparkrun_commands(paths: list[Path]) -> dict[str, dict]:
    """path → {"runtime", "command"} (or {"error"}) as sparkrun 0.4.2 renders each file."""
    require_service(
        PYTHON.exists(), f"sparkrun 0.4.2 in {PYTHON.parent.parent} (tools/sparkrun_env.sh)"
    )
    result = subprocess.run(
        [str(PYTHON), "-c", CHILD], input=json.dumps([str(p) for p in paths]),
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("DJANGO")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
