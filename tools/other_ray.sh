#!/usr/bin/env bash
# A second Ray version for the pair tests' "Ray version mismatch" (tests/runs/
# test_pair_runs.py): var/ray-<version>/ is a venv holding only that Ray, which sees the
# panel's .venv behind it (a .pth file), so a worker started with its Python is the panel's
# worker with another Ray — a Spark whose image has another vLLM, so another Ray.
# Usage: tools/other_ray.sh        (idempotent: a venv with its stamp costs nothing)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=2.59.0 # pyproject.toml pins 2.60.0: any other release that can reach its GCS
VENV=var/ray-$VERSION
STAMP=$VENV/.sparkpanel-ready
PANEL_SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PANEL_SITE" ]; then
  exit 0
fi
echo ">> $VENV: Ray $VERSION in front of the panel's .venv"
rm -rf "$VENV"
python3 -m venv --without-pip "$VENV"
.venv/bin/pip --python "$VENV/bin/python" install -q --no-deps "ray==$VERSION"
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PANEL_SITE" >"$site/zz-sparkpanel-venv.pth" # after its own Ray on sys.path
got=$("$VENV/bin/python" -c 'import django, ray; print(ray.__version__)')
if [ "$got" != "$VERSION" ]; then
  echo "!! $VENV imports Ray $got, not $VERSION" >&2
  exit 1
fi
echo "$PANEL_SITE" >"$STAMP"
