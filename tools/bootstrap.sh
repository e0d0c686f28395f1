#!/usr/bin/env bash
# Set up what both `make run` and `make test` need: the virtualenv with the pinned
# dependencies, and system packages (installed with apt when we are root).
# Usage: tools/bootstrap.sh [apt-package ...]   (packages needed beyond python3-venv)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

have_pkgs_missing() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  echo "${missing[@]:-}"
}

apt_install() {
  local missing
  missing=$(have_pkgs_missing "$@")
  [ -z "$missing" ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "!! missing system packages: $missing (this script knows apt only; install them by hand)" >&2
    return 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "!! missing system packages: $missing" >&2
    echo "   run: sudo apt-get update && sudo apt-get install -y $missing" >&2
    return 1
  fi
  echo ">> apt-get install $missing"
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine has no package lists yet; refresh them at most once an hour.
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -60 2>/dev/null | head -1)" ]; then
    apt-get update -q
  fi
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing
}

if command -v dpkg-query >/dev/null; then
  apt_install "$@"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo ">> creating $VENV with $($PYTHON --version)"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    apt_install python3-venv
    "$PYTHON" -m venv "$VENV"
  fi
fi

# Reinstall only when the pinned dependencies change.
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo ">> installing Python dependencies (pinned in pyproject.toml)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi
mkdir -p var
