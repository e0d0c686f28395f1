#!/usr/bin/env bash
# The peers' own tools, each in a venv of its own (their pins would fight the panel's):
#   guidellm   var/guidellm-0.8.1: GuideLLM, whose report format the panel exports and
#              imports (tests/benchmarks/test_guidellm_format.py validates the export with
#              GuideLLM's own pydantic model and imports a report GuideLLM wrote)
# Usage: tools/peers_env.sh guidellm|all
# Installed once per machine into the store tools/vllm_env.sh uses ($SPARKPANEL_VLLM_STORE,
# default ~/.cache/sparkpanel/venvs), var/<venv> a link to it; a venv with its stamp costs
# nothing. GuideLLM needs torch: the CPU build (torch==2.13.0, a local file on these
# machines; PyPI's default would be a CUDA build of several GB).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
GUIDELLM_VERSION=0.8.1
TORCH_VERSION=2.13.0
GUIDELLM_VENV=var/guidellm-$GUIDELLM_VERSION
STORE=${SPARKPANEL_VLLM_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkpanel/venvs}

setup_guidellm() {
  local venv=$GUIDELLM_VENV target stamp
  target="$STORE/$(basename "$venv")"
  stamp="$target/.sparkpanel-installed"
  mkdir -p var "$STORE"
  [ -d "$venv" ] && [ ! -L "$venv" ] && target=$(readlink -f "$venv") && stamp="$target/.sparkpanel-installed"
  [ -L "$venv" ] || [ -d "$venv" ] || ln -sfn "$target" "$venv"
  [ -f "$stamp" ] && return 0
  echo ">> installing guidellm==$GUIDELLM_VERSION into $venv ($target; a few minutes the first time)"
  [ -x "$target/bin/python" ] || "$PYTHON" -m venv "$target"
  "$target/bin/python" -m pip install -q "torch==$TORCH_VERSION" "guidellm==$GUIDELLM_VERSION"
  got=$("$target/bin/python" -c 'import importlib.metadata as m; print(m.version("guidellm"))')
  if [ "$got" != "$GUIDELLM_VERSION" ]; then
    echo "!! $venv holds guidellm $got, not $GUIDELLM_VERSION" >&2
    exit 1
  fi
  "$target/bin/python" -c 'from guidellm.benchmark.schemas.report import GenerativeBenchmarksReport' || {
    echo "!! guidellm's report model does not import in $venv" >&2
    exit 1
  }
  touch "$stamp"
}

case "${1:-}" in
  guidellm | all) setup_guidellm ;;
  *)
    echo "usage: $0 guidellm|all" >&2
    exit 2
    ;;
esac
