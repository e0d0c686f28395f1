#!/usr/bin/env bash
# `make run`: set everything up and serve the panel in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
# Redis is needed unless REDIS_URL points at one elsewhere; install it when we can.
if ! command -v redis-server >/dev/null; then
  tools/bootstrap.sh redis-server || echo "!! continuing: REDIS_URL must point at a running Redis" >&2
else
  tools/bootstrap.sh
fi
# var/ holds the database (sessions), Redis' data and run logs: the user's alone. Everything
# created from here on is 0600/0700, and what an older install left readable is fixed first.
umask 077
.venv/bin/python tools/devrun.py --private-var
# Redis first, then the migrations, the demo data and the servers (tools/devrun.py).
exec .venv/bin/python tools/devrun.py
