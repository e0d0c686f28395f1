#!/usr/bin/env bash
# The busy-machine check: fresh clones of one commit run `.ci/run` (exactly `make test`,
# with CI=true) one after another while stress-ng keeps one core busy, as a CI runner
# shared with another job would. Stops at the first failure.
#
# Usage: tools/loaded_check.sh [REV]        (default: HEAD of this checkout)
#   RUNS=3                      how many runs in a row
#   OUT=/tmp/sparkpanel-loaded  where the clones, their logs and the summary go
# Each run's full output is $OUT/run-N.log, its per-test timings $OUT/run-N-junit.xml;
# $OUT/summary has one line per run: the commit, the exit status and the wall time.
# A clone is removed after it passes (the vLLM venvs are shared, the rest is rebuilt).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
rev=$(git -C "$repo" rev-parse "${1:-HEAD}")
runs=${RUNS:-3}
out=${OUT:-/tmp/sparkpanel-loaded}
mkdir -p "$out"

if ! command -v stress-ng >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get install -y -q --no-install-recommends stress-ng >/dev/null
  else
    echo "!! stress-ng is missing: sudo apt-get install stress-ng" >&2
    exit 1
  fi
fi
stress-ng --cpu 1 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null' EXIT
echo ">> stress-ng --cpu 1 (pid $hog); $runs run(s) of $rev; logs in $out"

for i in $(seq "$runs"); do
  clone="$out/ci$i"
  rm -rf "$clone"
  git clone -q "$repo" "$clone" && git -C "$clone" checkout -q "$rev" || exit 1
  start=$(date +%s)
  (cd "$clone" && CI=true bash .ci/run) >"$out/run-$i.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  cp "$clone/var/test-artifacts/junit.xml" "$out/run-$i-junit.xml" 2>/dev/null || true
  tally=$(grep -E '^=+ .*(passed|failed).* in ' "$out/run-$i.log" | tail -1 | tr -d '=')
  line="run $i of $runs: ${rev:0:10} rc=$rc wall=$((secs / 60))m$((secs % 60))s ${tally:-}"
  echo "$line" | tee -a "$out/summary"
  [ "$rc" = 0 ] || exit "$rc"
  rm -rf "$clone"
done
