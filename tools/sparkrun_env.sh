#!/usr/bin/env bash
# The real sparkrun 0.4.2 (PyPI) on this machine's Python 3.11, so tests can render recipes
# with sparkrun's own code (../shared/real/recipes/check_recipes.py --sparkrun-python ...).
# sparkrun declares Requires-Python >=3.12, but only for PEP 695 type parameters on three
# functions (`def f[T](...)`); its pinned dependencies all install on 3.11. So: pip with
# --ignore-requires-python, then rewrite each `def f[T](` to `def f(` with a module-level
# `T = TypeVar("T")`, and refuse the venv unless every sparkrun module compiles.
# Usage: tools/sparkrun_env.sh   (prints the venv's python last)
# Idempotent: once the stamp is there it costs nothing (no Python starts).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${SPARKRUN_BASE_PYTHON:-/usr/bin/python3.11}
VERSION=0.4.2
STORE=${SPARKPANEL_VLLM_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkpanel/venvs}
VENV=${SPARKRUN_VENV:-$STORE/sparkrun-$VERSION}
RECIPE=1 # bump when what this script does to the venv changes
STAMP="$VENV/.sparkpanel-installed-$RECIPE"
PY="$VENV/bin/python"

if [ ! -f "$STAMP" ]; then
  start=$SECONDS
  [ -x "$PY" ] || { echo ">> creating $VENV with $($PYTHON --version)"; "$PYTHON" -m venv "$VENV"; }
  echo ">> installing sparkrun==$VERSION into $VENV (--ignore-requires-python)"
  # (this machine's pip config names file:// indexes that may be absent: drop that noise)
  "$PY" -m pip install -q --ignore-requires-python "sparkrun==$VERSION" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  # PEP 695 → 3.11: `def name[T, U](` → `def name(` plus `T = TypeVar("T")` at module level,
  # inserted before the first ordinary import (after the docstring and any __future__ import).
  "$PY" - <<'PY'
import pathlib, re, sys, sysconfig
DEF = re.compile(r"^(\s*(?:async\s+)?def\s+\w+)\[(\w+(?:\s*,\s*\w+)*)\]\(", re.M)
IMPORT = re.compile(r"^(?:import\s|from\s+(?!__future__\b)\S+\s+import\s)", re.M)
root = pathlib.Path(sysconfig.get_paths()["purelib"], "sparkrun")
for path in sorted(root.rglob("*.py")):
    src = path.read_text(encoding="utf-8")
    names = [n.strip() for m in DEF.finditer(src) for n in m.group(2).split(",")]
    if not names:
        continue
    src = DEF.sub(r"\1(", src)
    new = [n for n in dict.fromkeys(names) if not re.search(rf"^{n}\s*=", src, re.M)]
    block = "from typing import TypeVar\n" + "".join(f'{n} = TypeVar("{n}")\n' for n in new)
    at = IMPORT.search(src)
    if at is None:
        sys.exit(f"!! {path}: no module-level import to put the TypeVars before")
    src = src[: at.start()] + block + src[at.start():]
    path.write_text(src, encoding="utf-8")
    print(f">> {path.relative_to(root.parent)}: type parameters {', '.join(dict.fromkeys(names))} -> TypeVar")
PY
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$PY" -m compileall -q "$site/sparkrun" >/dev/null ||
    { echo "!! sparkrun modules still fail to compile on $("$PY" --version)" >&2; exit 1; }
  # Smoke: sparkrun's own renderer on a small recipe.
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  printf '%s\n' 'recipe_version: "2"' 'model: org/tiny-model' 'runtime: vllm' \
    'container: example/vllm:latest' 'defaults:' '  port: 8001' '  host: 0.0.0.0' \
    '  tensor_parallel: 1' 'command: |' '  vllm serve {model} --host {host} --port {port} -tp {tensor_parallel}' \
    >"$tmp/smoke.yaml"
  cmd=$("$PY" - "$tmp/smoke.yaml" <<'PY'
import logging, sys; logging.disable(logging.CRITICAL)
from pathlib import Path
from sparkrun.core.recipe import Recipe
from sparkrun.runtimes.vllm_distributed import VllmDistributedRuntime
r = Recipe.load(Path(sys.argv[1]), offline=True)
print(VllmDistributedRuntime().generate_command(r, {}, is_cluster=False))
PY
  )
  echo ">> smoke render: $cmd"
  case "$cmd" in
    *"vllm serve org/tiny-model"*"--port 8001"*"-tp 1"*) ;;
    *) echo "!! unexpected smoke render from sparkrun" >&2; exit 1 ;;
  esac
  rm -f "$VENV"/.sparkpanel-installed-*
  touch "$STAMP"
  echo ">> sparkrun $("$PY" -c 'import sparkrun; print(sparkrun.__version__)') ready in $VENV ($((SECONDS - start))s)"
fi
echo "sparkrun $VERSION: $PY"
