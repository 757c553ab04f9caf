#!/usr/bin/env bash
# The README's run command: set everything up and run the whole system on this
# machine, in the foreground. Ctrl-C stops everything it started.
#
#   1. .venv and the project installed in it             (scripts/setup.sh)
#   2. Redis: $REDIS_URL (with its password, or REDIS_PASSWORD_FILE), else a
#      private redis-server started here with a generated password
#      (var/redis.password, 0600), else instructions and exit
#   3. database: $DATABASE_URL if set (created if it does not exist;
#      GPUSCHED_CREATE_DATABASE=0 to refuse instead), else SQLite at var/db.sqlite3; migrate
#   4. demo admin and demo user (credentials printed)
#   5. web server, Celery worker and beat, and local node agents with virtual
#      GPUs (when the agent is part of the checkout)
#
# Environment: HOST/PORT of the web server (127.0.0.1:8000), GPUSCHED_LOCAL_AGENTS
# (number of agents, default 2; 0 for none), GPUSCHED_AGENT_GPUS (virtual GPUs
# per agent, default 4), GPUSCHED_REDIS_PORT (private Redis port, default 6390),
# SECRET_KEY (default: generated once into var/secret_key), STOP_TIMEOUT (seconds
# the agents get on Ctrl-C to stop their jobs, default 45).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

"$ROOT/scripts/setup.sh"
mkdir -p var

# One stack per agents' work dir: a second one would find every agent's work dir in use and stop
# only after its web server failed on the port. Say so before starting anything.
AGENTS_DIR="${AGENT_WORKDIR:-var/agent}"
mkdir -p "$AGENTS_DIR"
UP_PID_FILE="$AGENTS_DIR/up.pid"
if [ -s "$UP_PID_FILE" ]; then
    other="$(cat "$UP_PID_FILE")"
    if [ "$other" != "$$" ] && kill -0 "$other" 2>/dev/null \
            && ps -p "$other" -o command= 2>/dev/null | grep -q "up.sh"; then
        die "another scripts/up.sh (pid $other) runs agents in $AGENTS_DIR: stop it first (Ctrl-C in its terminal), or give this one AGENT_WORKDIR and PORT of its own"
    fi
fi
echo "$$" >"$UP_PID_FILE"

# Components by shutdown tier. The web server, worker and beat stop first, so
# no scheduling cycle can launch a job on an agent that is stopping; then the
# agents stop their jobs (their exit reports wait in Redis for the next start);
# a private Redis stops last.
SERVICE_PIDS=()
AGENT_PIDS=()
REDIS_PIDS=()
NAMES=()
stopping=0

# stop_group TIMEOUT PID...: SIGTERM, wait up to TIMEOUT seconds, then SIGKILL.
stop_group() {
    local timeout="$1" pid alive
    shift
    [ $# -gt 0 ] || return 0
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 $((timeout * 5))); do
        alive=0
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && return 0
        sleep 0.2
    done
    for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
}

stop_all() {
    [ "$stopping" = 1 ] && return
    stopping=1
    [ "${#NAMES[@]}" -gt 0 ] || return 0
    say "Stopping: ${NAMES[*]}"
    stop_group 20 "${SERVICE_PIDS[@]}"
    if [ "${#AGENT_PIDS[@]}" -gt 0 ]; then
        # STOP_TIMEOUT (default 45 s) covers the default 30 s grace period of jobs.
        say "Node agents are stopping their jobs (each gets its grace period)..."
        stop_group $((${STOP_TIMEOUT:-45} + 5)) "${AGENT_PIDS[@]}"
    fi
    # Nothing runs any more: drop the loop's flags, /metrics' histogram and the Channels layer's
    # keys (queues holding undelivered reports and commands stay; see portal/runtime_keys.py).
    if [ -n "${REDIS_URL:-}" ]; then
        "$VENV/bin/python" "$ROOT/manage.py" clear_runtime_keys || say "could not clear the runtime keys in Redis"
    fi
    stop_group 5 "${REDIS_PIDS[@]}"
    wait 2>/dev/null || true
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all; [ "$(cat "$UP_PID_FILE" 2>/dev/null)" != "$$" ] || rm -f "$UP_PID_FILE"' EXIT

# start TIER NAME CMD...: run CMD in the background, its output prefixed by NAME.
start() {
    local tier="$1" name="$2"
    shift 2
    # Each component runs in its own session, so a Ctrl-C in the terminal
    # reaches this script only and stop_all can stop them in order; the
    # prefixing sed ignores SIGINT so output is not cut while they stop.
    setsid "$@" > >(trap '' INT && exec sed -u "s/^/[$name] /") 2>&1 &
    case "$tier" in
        redis) REDIS_PIDS+=("$!") ;;
        *) SERVICE_PIDS+=("$!") ;;
    esac
    NAMES+=("$name")
}

# start_agent NAME CMD...: run the node agent CMD under a supervisor that
# restarts it whenever it exits on its own (after 1 s, doubling up to 30 s while
# it keeps dying young). Unlike the web server, worker and beat, an agent's
# death stops nothing else: its jobs run on in their own sessions and the
# restarted agent adopts them. Exit status 2 (bad options, or another agent on
# its work dir) would only repeat, so it is reported and not retried. SIGTERM
# to the supervisor is passed on to the agent, which then stops its jobs; it
# gets SIGKILL if it is still there STOP_TIMEOUT seconds later.
start_agent() {
    local name="$1"
    shift
    (
        set +e
        child="" stop=0 delay=1 backstop=""
        on_term() {
            stop=1
            [ -n "$child" ] || return 0
            kill -TERM "$child" 2>/dev/null
            (sleep "${STOP_TIMEOUT:-45}" && kill -KILL "$child" 2>/dev/null) &
            backstop=$!
        }
        # Once the agent is gone, its SIGKILL backstop goes too: left to run out, it would signal
        # whatever process has the agent's pid by then.
        stopped() { [ -z "$backstop" ] || kill "$backstop" 2>/dev/null; exit 0; }
        trap on_term TERM
        while :; do
            born=$SECONDS
            setsid "$@" > >(trap '' INT && exec sed -u "s/^/[$name] /") 2>&1 &
            child=$!
            wait "$child"
            status=$?
            while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done
            [ "$stop" = 1 ] && stopped
            if [ "$status" = 2 ]; then
                say "Agent $name exited (status 2: bad options or work dir in use); not restarting it. The rest keep running."
                exit 2
            fi
            [ $((SECONDS - born)) -ge 60 ] && delay=1
            say "Agent $name exited (status $status); restarting it in ${delay}s (its jobs keep running and are adopted)."
            sleep "$delay" &
            child=$!
            wait "$child"
            [ "$stop" = 1 ] && stopped
            delay=$((delay * 2 > 30 ? 30 : delay * 2))
        done
    ) &
    AGENT_PIDS+=("$!")
    NAMES+=("$name")
}

# --- Redis ----------------------------------------------------------------
# Redis always asks for a password (docs/security.md): either REDIS_URL names a
# server with its credentials, or a private redis-server is started here with a
# password generated once into var/redis.password (mode 0600). Its URL carries
# no password; every component reads it from REDIS_PASSWORD_FILE.
if [ -n "${REDIS_URL:-}" ]; then
    redis_ok "$REDIS_URL" || die "REDIS_URL does not answer PING (check its host and password)"
    case "$REDIS_URL" in
        *://*:*@*) say "Redis: from REDIS_URL (with a password)" ;;
        *) [ -n "${REDIS_PASSWORD_FILE:-}" ] && say "Redis: from REDIS_URL, password from REDIS_PASSWORD_FILE" \
               || say "Redis: from REDIS_URL, WITHOUT a password: anyone who reaches it can read and forge messages" ;;
    esac
elif command -v redis-server >/dev/null 2>&1; then
    port="${GPUSCHED_REDIS_PORT:-6390}"
    mkdir -p var/redis
    if [ ! -s var/redis.password ]; then
        (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >var/redis.password)
    fi
    # The password goes into a 0600 config file, not onto the command line (where ps shows it).
    (umask 077 && printf 'requirepass %s\n' "$(cat var/redis.password)" >var/redis/auth.conf)
    start redis redis redis-server "$ROOT/var/redis/auth.conf" --bind 127.0.0.1 --port "$port" --save "" \
        --appendonly no --dir "$ROOT/var/redis"
    export REDIS_URL="redis://127.0.0.1:$port/0" REDIS_PASSWORD_FILE="$ROOT/var/redis.password"
    authed="redis://:$(cat var/redis.password)@127.0.0.1:$port/0"
    for _ in $(seq 1 50); do redis_ok "$authed" && break; sleep 0.2; done
    redis_ok "$authed" || die "the private redis-server on port $port did not start"
    say "Redis: $REDIS_URL (private redis-server started here; password in var/redis.password)"
else
    say "Redis is needed and none was found. Any one of these works:"
    say "  Debian/Ubuntu:  sudo apt-get install redis-server   (then run this again)"
    say "  macOS:          brew install redis   (then run this again)"
    say "  elsewhere:      export REDIS_URL=redis://:PASSWORD@HOST:6379/0"
    exit 1
fi

# --- Settings -------------------------------------------------------------
if [ -z "${SECRET_KEY:-}" ]; then
    if [ ! -s var/secret_key ]; then
        (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(50))' >var/secret_key)
    fi
    SECRET_KEY="$(cat var/secret_key)"
    export SECRET_KEY
fi
# Per-node agent tokens (docs/security.md): the server holds the secret, each
# agent only its own token (given below); the agents never see the secret.
if [ -z "${GPUSCHED_AGENT_SECRET:-}" ]; then
    if [ ! -s var/agent_secret ]; then
        (umask 077 && "$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >var/agent_secret)
    fi
    GPUSCHED_AGENT_SECRET="$(cat var/agent_secret)"
    export GPUSCHED_AGENT_SECRET
fi
# A laptop has no per-user accounts for jobs: single-user mode, said on every page and in the log.
export GPUSCHED_SINGLE_USER="${GPUSCHED_SINGLE_USER:-1}"
export HOST="${HOST:-127.0.0.1}" PORT="${PORT:-8000}"
# One checkpoint folder for all local agents, so a job preempted on one node
# resumes from its checkpoint on another.
export GPUSCHED_CHECKPOINT_ROOT="${GPUSCHED_CHECKPOINT_ROOT:-$ROOT/var/checkpoints}"
# The URL as given, but never its password (this line goes to terminals and logs).
say "Database: $(printf '%s' "${DATABASE_URL:-SQLite at var/db.sqlite3 (set DATABASE_URL for PostgreSQL)}" \
    | sed -E 's#^([a-z0-9+]+://[^:/@]*):[^/]*@#\1:***@#')"
# One command sets everything up: a PostgreSQL database that does not exist yet is created.
export GPUSCHED_CREATE_DATABASE="${GPUSCHED_CREATE_DATABASE:-1}"

# --- Database and demo accounts -------------------------------------------
"$ROOT/scripts/serve.sh" migrate
"$ROOT/scripts/serve.sh" demo-users

# --- Services -------------------------------------------------------------
start service web "$ROOT/scripts/serve.sh" web
start service worker "$ROOT/scripts/serve.sh" worker
start service beat "$ROOT/scripts/serve.sh" beat

# Local node agents with virtual GPUs, once the agent is part of the checkout.
agents="${GPUSCHED_LOCAL_AGENTS:-2}"
if [ -f cluster/agent/__main__.py ]; then
    # Each agent gets a Redis user of its own that reaches only its command queue and appends
    # reports (docs/security.md, "Another node"); a Redis that cannot (before 7, or a connection
    # not allowed ACL) leaves the agents on the shared password, said here.
    nodes=()
    for i in $(seq 1 "$agents"); do nodes+=("local-$i"); done
    node_urls=()
    if "$VENV/bin/python" manage.py broker_acl --apply "${nodes[@]}" >/dev/null 2>var/broker_acl.log; then
        mapfile -t node_urls < <("$VENV/bin/python" manage.py broker_acl --url "${nodes[@]}")
        say "Redis: a user of its own for each agent (${nodes[*]})"
    else
        say "Redis: the agents share the password ($(tail -1 var/broker_acl.log))"
    fi
    for i in $(seq 1 "$agents"); do
        broker=()
        [ "${#node_urls[@]}" -ge "$i" ] && broker=(-u REDIS_PASSWORD_FILE -u CELERY_BROKER_URL "REDIS_URL=${node_urls[$((i - 1))]}")
        # --kill-jobs-on-exit: Ctrl-C stops the agents' jobs too (after their grace period).
        # --single-user: a laptop has no per-user accounts for jobs; every job runs as
        # this user, unconfined between jobs (the agent's log says so; docs/agent.md).
        # PATH: single-user jobs get the agent's; the venv's bin holds JupyterLab for notebook sessions.
        token="$("$VENV/bin/python" manage.py agent_token "local-$i")"
        start_agent "local-$i" env -u GPUSCHED_AGENT_SECRET -u SECRET_KEY "${broker[@]}" GPUSCHED_AGENT_TOKEN="$token" \
            PATH="$VENV/bin:$PATH" \
            "$ROOT/scripts/serve.sh" agent "local-$i" "${GPUSCHED_AGENT_GPUS:-4}" \
            --kill-jobs-on-exit --single-user
    done
else
    say "No node agent in this checkout (cluster/agent): jobs will stay PENDING."
fi

say ""
say "Portal:   http://$HOST:$PORT/   (API docs: http://$HOST:$PORT/api/docs/)"
say "Running:  ${NAMES[*]}. Press Ctrl-C to stop everything."

# Stop everything as soon as the web server, worker, beat or a private Redis
# exits on its own: a restart loop would hide what is usually a configuration
# error (port in use, database unreachable) behind a portal that half works.
# Agents are restarted by their supervisors (start_agent) instead.
set +e
wait -n "${SERVICE_PIDS[@]}" "${REDIS_PIDS[@]}"
status=$?
set -e
if [ "$stopping" = 0 ]; then
    say "A component exited (status $status); stopping the rest."
    stop_all
    exit 1
fi
