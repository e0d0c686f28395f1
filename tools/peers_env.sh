#!/usr/bin/env bash
# The peers' own tools, each in a venv of its own (their pins would fight the panel's):
#   guidellm   var/guidellm-0.8.1: GuideLLM, whose report format the panel exports and
#              imports (tests/benchmarks/test_guidellm_format.py validates the export with
#              GuideLLM's own pydantic model and imports a report GuideLLM wrote)
#   aiperf     var/aiperf-0.13.0: NVIDIA's AIPerf, one of the clients `make bench` compares
#              the harness with (bench/peers_accuracy.py); make test does not need it
# Usage: tools/peers_env.sh guidellm|aiperf|all
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
AIPERF_VERSION=0.13.0
STORE=${SPARKPANEL_VLLM_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkpanel/venvs}

# setup NAME VERSION CHECK PIP-ARGS...: the venv var/NAME-VERSION (a link into the store),
# installed once (its stamp), checked for the version and with the Python line CHECK.
setup() {
  local name=$1 version=$2 check=$3 venv target stamp got
  shift 3
  venv=var/$name-$version
  target="$STORE/$(basename "$venv")"
  mkdir -p var "$STORE"
  [ -d "$venv" ] && [ ! -L "$venv" ] && target=$(readlink -f "$venv")
  stamp="$target/.sparkpanel-installed"
  [ -L "$venv" ] || [ -d "$venv" ] || ln -sfn "$target" "$venv"
  [ -f "$stamp" ] && return 0
  echo ">> installing $name==$version into $venv ($target; a few minutes the first time)"
  [ -x "$target/bin/python" ] || "$PYTHON" -m venv "$target"
  "$target/bin/python" -m pip install -q "$@"
  got=$("$target/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))")
  if [ "$got" != "$version" ]; then
    echo "!! $venv holds $name $got, not $version" >&2
    exit 1
  fi
  "$target/bin/python" -c "$check" || {
    echo "!! $name does not import in $venv" >&2
    exit 1
  }
  touch "$stamp"
}

setup_guidellm() {
  setup guidellm "$GUIDELLM_VERSION" \
    'from guidellm.benchmark.schemas.report import GenerativeBenchmarksReport' \
    "torch==$TORCH_VERSION" "guidellm==$GUIDELLM_VERSION"
}

setup_aiperf() {
  setup aiperf "$AIPERF_VERSION" 'import aiperf.cli' "aiperf==$AIPERF_VERSION"
}

case "${1:-}" in
  guidellm) setup_guidellm ;;
  aiperf) setup_aiperf ;;
  all) setup_guidellm && setup_aiperf ;;
  *)
    echo "usage: $0 guidellm|aiperf|all" >&2
    exit 2
    ;;
esac
