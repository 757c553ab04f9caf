# shellcheck shell=bash
# Shared helpers for the scripts in this folder; sourced, not run.
# Sets ROOT (the repository root, also the working directory) and VENV.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
cd "$ROOT" || exit 1

say() { printf '%s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# redis_ok URL: true when a Redis server answers PING at URL (needs the venv).
redis_ok() {
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys
import redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1, socket_timeout=2).ping()
PY
}

# postgres_ok URL: true when PostgreSQL accepts a connection at URL (needs the venv).
postgres_ok() {
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys
import psycopg
psycopg.connect(sys.argv[1], connect_timeout=2).close()
PY
}

