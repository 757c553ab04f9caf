#!/usr/bin/env bash
# Run ONE component of the system in the foreground. The run command
# (scripts/up.sh), the Dockerfile and docker-compose.yml all start components
# through this script, so they run the very same commands.
#
#   scripts/serve.sh migrate            apply database migrations (GPUSCHED_CREATE_DATABASE=1:
#                                       create the PostgreSQL database first if it does not exist)
#   scripts/serve.sh demo-users         create/refresh the demo admin and user, print credentials
#   scripts/serve.sh web                the portal (daphne, HTTP and websockets) on $HOST:$PORT,
#                                       $WEB_PROCESSES processes (default: one per core, at most 4)
#   scripts/serve.sh worker             Celery worker on the default queue only (never node.*)
#   scripts/serve.sh beat               Celery beat (periodic tasks)
#   scripts/serve.sh agent NAME [GPUS [OPTION...]]
#                                       a node agent with GPUS virtual GPUs (default 4);
#                                       options go to python -m cluster.agent
#
# Configuration comes from the environment (DATABASE_URL, REDIS_URL,
# REDIS_PASSWORD_FILE, SECRET_KEY, DEBUG, ...; see portal/settings.py). HOST defaults to 127.0.0.1, PORT to 8000.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ -x "$VENV/bin/python" ] || die "no virtual environment at $VENV: run scripts/setup.sh first"
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-portal.settings}"
mkdir -p var

component="${1:-}"
[ $# -gt 0 ] && shift
case "$component" in
    migrate)
        # One clear line when the database is missing or unreachable; GPUSCHED_CREATE_DATABASE=1
        # (scripts/up.sh sets it) creates a missing one.
        create=""
        if [ "${GPUSCHED_CREATE_DATABASE:-0}" = 1 ]; then create="--create"; fi
        # shellcheck disable=SC2086  # $create is one word or none
        "$VENV/bin/python" manage.py ensure_database $create || exit 1
        exec "$VENV/bin/python" manage.py migrate --noinput ;;
    demo-users)
        exec "$VENV/bin/python" manage.py demo_users \
            --url "${GPUSCHED_PUBLIC_URL:-http://${HOST:-127.0.0.1}:${PORT:-8000}}" "$@" ;;
    web)
        # A pool of PostgreSQL connections and a bounded wait for held rows, for the web server only
        # (portal/database.py says why); several daphne processes on one socket, supervised
        # (portal/web_processes.py).
        DATABASE_POOL="${DATABASE_POOL:-true}" DATABASE_LOCK_WAIT_S="${DATABASE_LOCK_WAIT_S:-5}" \
            exec "$VENV/bin/python" -m portal.web_processes ;;
    worker)
        exec "$VENV/bin/celery" -A portal worker --loglevel "${CELERY_LOG_LEVEL:-info}" \
            --queues "${WORKER_QUEUES:-celery}" --concurrency "${WORKER_CONCURRENCY:-2}" \
            --hostname "worker@%h" ;;
    beat)
        exec "$VENV/bin/celery" -A portal beat --loglevel "${CELERY_LOG_LEVEL:-info}" \
            --schedule "${BEAT_SCHEDULE_FILE:-var/celerybeat-schedule}" ;;
    agent)
        # The agent reads no Django settings: give it the Redis password in its URL.
        if [ -n "${REDIS_PASSWORD_FILE:-}" ] && [ -n "${REDIS_URL:-}" ]; then
            REDIS_URL="$("$VENV/bin/python" -c 'import sys
from portal.env import read_secret_file, redis_url_with_password
print(redis_url_with_password(sys.argv[1], read_secret_file("REDIS_PASSWORD_FILE", sys.argv[2])))' \
                "$REDIS_URL" "$REDIS_PASSWORD_FILE")" || die "REDIS_PASSWORD_FILE cannot be read"
            export REDIS_URL
        fi
        [ $# -ge 1 ] || die "usage: scripts/serve.sh agent NAME [GPUS [AGENT OPTION...]]"
        [ -f cluster/agent/__main__.py ] || die "this checkout has no node agent (cluster/agent)"
        name="$1"
        gpus="${2:-4}"
        shift $(( $# >= 2 ? 2 : 1 ))
        exec "$VENV/bin/python" -m cluster.agent --name "$name" --gpus "$gpus" \
            --workdir "${AGENT_WORKDIR:-var/agent}/$name" "$@" ;;
    *)
        die "usage: scripts/serve.sh {migrate|demo-users|web|worker|beat|agent NAME [GPUS]}" ;;
esac
