#!/usr/bin/env bash
# The README's test command: run the whole test suite on this machine.
#
# Makes sure of everything the tests need, installing or starting what is
# missing (installing needs root and apt-get, as on a fresh Debian machine):
#   .venv with the project      scripts/setup.sh
#   PostgreSQL on 127.0.0.1:5432, user postgres without password (trust)
#   Redis on 127.0.0.1:6379
#   Chromium at /usr/bin/chromium for the browser tests
#   bwrap and mmdebstrap for the confinement tests (jobs in a real image)
#   slapd and ldap-utils for the LDAP login tests, and the headers python-ldap builds
#   with (libldap2-dev libsasl2-dev), installed before the virtual environment
# then runs pytest with DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test)
# and passes its arguments on: scripts/test.sh tests/scheduler/core -q
# Without arguments it runs the whole suite as two pytest processes side by side (see
# run_split below; the second uses $SIDE_DATABASE_URL, default $DATABASE_URL with "_side"
# appended, and $SIDE_REDIS_URL, default REDIS_URL's next database); TEST_SERIAL=1 runs one.
#
# Trace data: $GPUSCHED_TRACES_DIR, else ../shared/traces next to the repository.
# Exit status: pytest's (non-zero when either process fails), except that "no tests
# collected" (5) counts as success.
# SKIP_SERVICES=1 skips the service checks (e.g. for tests that need none).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

apt_install() {
    can_install || die "$* missing: install it (Debian/Ubuntu: sudo apt-get install -y $*)"
    say "Installing $* with apt-get"
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
    postgres_ok "$DATABASE_URL" && return 0
    # pytest-django creates its own test database, so the server is what matters:
    # try the maintenance database too before starting anything.
    local server_url="${DATABASE_URL%/*}/postgres"
    postgres_ok "$server_url" && return 0
    case "$DATABASE_URL" in
        *@127.0.0.1:*|*@localhost:*|*@127.0.0.1/*|*@localhost/*) ;;
        *) die "PostgreSQL at $DATABASE_URL is unreachable (not a local server: not starting one)" ;;
    esac
    command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
    local version
    # shellcheck disable=SC2012  # cluster versions are plain numbers
    version="$(ls /etc/postgresql | sort -V | tail -n1)"
    [ -n "$version" ] || die "no PostgreSQL cluster under /etc/postgresql"
    say "Starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
    pg_isready -q -h 127.0.0.1 -p 5432 || die "PostgreSQL did not start (pg_ctlcluster $version main)"
    postgres_ok "$server_url" && return 0
    allow_local_trust "$version"
    postgres_ok "$server_url" || die "PostgreSQL does not accept $server_url (see pg_hba.conf)"
}

# A fresh Debian cluster asks for a password on TCP. On a throwaway CI machine
# (CI=true, root) let local TCP connections in without one, as the tests expect.
allow_local_trust() {
    local hba="/etc/postgresql/$1/main/pg_hba.conf"
    [ "${CI:-}" = true ] && [ "$(id -u)" = 0 ] && [ -w "$hba" ] || return 0
    grep -q '^host all all 127.0.0.1/32 trust' "$hba" && return 0
    say "CI: allowing trust authentication for 127.0.0.1 and ::1 in $hba"
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$1" main reload
    sleep 1
}

ensure_redis() {
    redis_ok "$REDIS_URL" && return 0
    case "$REDIS_URL" in
        redis://127.0.0.1:6379*|redis://localhost:6379*) ;;
        *) die "Redis at $REDIS_URL is unreachable (not the local default: not starting one)" ;;
    esac
    command -v redis-server >/dev/null 2>&1 || apt_install redis-server
    say "Starting redis-server on 127.0.0.1:6379"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 1 30); do redis_ok "$REDIS_URL" && return 0; sleep 0.5; done
    die "redis-server did not start (see /var/log/redis/ci.log)"
}

ensure_chromium() {
    [ -x /usr/bin/chromium ] && return 0
    if can_install; then
        apt_install chromium
    else
        say "warning: /usr/bin/chromium is missing; browser tests will not run (apt-get install chromium)"
    fi
}

ensure_confinement_tools() {
    command -v bwrap >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 && return 0
    if can_install; then
        apt_install bubblewrap mmdebstrap
    else
        say "warning: bwrap or mmdebstrap is missing; image tests will not run (apt-get install bubblewrap mmdebstrap)"
    fi
}

ensure_ldap() {
    command -v ldapadd >/dev/null 2>&1 && [ -x /usr/sbin/slapd ] && [ -f /usr/include/ldap.h ] &&
        [ -f /usr/include/sasl/sasl.h ] && return 0
    if can_install; then
        # slapd's package asks for a domain and an admin password: the tests run their own
        # server with a throwaway config, so the packaged one is left unconfigured.
        ! command -v debconf-set-selections >/dev/null 2>&1 ||
            echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
        apt_install slapd ldap-utils libldap2-dev libsasl2-dev
    else
        say "warning: slapd, ldap-utils or the LDAP headers are missing; LDAP tests will not run" \
            "(apt-get install slapd ldap-utils libldap2-dev libsasl2-dev)"
    fi
}

[ "${SKIP_SERVICES:-0}" = 1 ] || ensure_ldap
"$ROOT/scripts/setup.sh"
traces="${GPUSCHED_TRACES_DIR:-$ROOT/../shared/traces}"
if [ ! -d "$traces" ]; then
    say "note: no trace data at $traces; trace tests skip (under CI=true they fail)."
    say "      Set GPUSCHED_TRACES_DIR to the shared traces folder (never copy traces into the repo)."
fi
if [ "${SKIP_SERVICES:-0}" != 1 ]; then
    ensure_postgres
    ensure_redis
    ensure_chromium
    ensure_confinement_tools
fi

# pytest's status, with "no tests collected" (5) as success.
run_pytest() {
    local status=0
    "$VENV/bin/python" -m pytest "$@" || status=$?
    if [ "$status" = 5 ]; then
        say "pytest collected no tests; treating that as success."
        status=0
    fi
    return "$status"
}

# The whole suite as two pytest processes side by side, each with a test database and a Redis
# database of its own: most of the suite's time is spent waiting on real processes (agents,
# workers, private servers, jobs running for seconds), not computing. The tests that create
# things which exist once per machine under names they choose (POSIX users, job images,
# network namespaces, cgroups of their own naming) must not meet each other, so they all run
# in the first process, one at a time; SIDE_TESTS, which create none of them, run in the
# second (their agents' cgroups carry each stack's own random node names). A new folder
# joins the first (the safe default) until it is listed here; files of a folder that stays
# in the first may be listed one by one (or by a pattern), and the first then leaves them
# out: the cluster tests outside the agent's and the hostile-input tests, which brings the
# first process's time (the longer) closer to the second's. tests/scripts/
# test_entry_points.py checks the list. The second pytest is started through nice itself,
# not run_pytest, so that the trap below signals pytest and not a subshell around it.
SIDE_TESTS=(tests/audit tests/browser tests/e2e tests/gpusched tests/gputelemetry tests/interactive tests/jobprogress
            tests/notifications tests/portal tests/scheduler tests/scripts tests/test_architecture.py
            tests/test_conftest.py tests/test_manage.py tests/cluster/test_*.py
            tests/adversarial/test_adv_hostile_input.py)

run_split() {
    local machine_tests=() entry listed side
    for entry in tests/*; do
        case "$entry" in tests/__init__.py|tests/conftest.py|tests/__pycache__) continue ;; esac
        listed=0
        for side in "${SIDE_TESTS[@]}"; do [ "$entry" = "$side" ] && listed=1; done
        [ "$listed" = 1 ] || machine_tests+=("$entry")
    done
    for side in "${SIDE_TESTS[@]}"; do  # files of the first process's folders, run in the second
        case "$side" in tests/*/*) machine_tests+=("--ignore=$side") ;; esac
    done
    local side_db="${SIDE_DATABASE_URL:-${DATABASE_URL}_side}"
    local side_redis="${SIDE_REDIS_URL:-}"
    if [ -z "$side_redis" ]; then
        case "${REDIS_URL##*/}" in
            ''|*[!0-9]*) die "REDIS_URL ($REDIS_URL) ends in no database number: set SIDE_REDIS_URL, or TEST_SERIAL=1" ;;
            *) side_redis="${REDIS_URL%/*}/$(( ${REDIS_URL##*/} + 1 ))" ;;
        esac
    fi
    local log
    log="$(mktemp -t gpusched-side-tests.XXXXXX)"
    say "Running pytest in two processes: ${machine_tests[*]} here (DATABASE_URL=$DATABASE_URL, REDIS_URL=$REDIS_URL);"
    say "  ${SIDE_TESTS[*]} alongside (DATABASE_URL=$side_db, REDIS_URL=$side_redis), shown when both are done"
    # The second process runs at the lowest CPU priority: the first one's fault tests time their
    # restarts and redeliveries, and mostly sleep, so they get the cores when they want them and
    # leave the rest to the second.
    DATABASE_URL="$side_db" REDIS_URL="$side_redis" nice -n 19 "$VENV/bin/python" -m pytest -p no:cacheprovider \
        "${SIDE_TESTS[@]}" >"$log" 2>&1 &
    local side_pid=$! machine_status=0 side_status=0
    trap 'kill -TERM "$side_pid" 2>/dev/null || true' INT TERM
    run_pytest "${machine_tests[@]}" || machine_status=$?
    wait "$side_pid" || side_status=$?
    [ "$side_status" != 5 ] || side_status=0  # no tests collected
    say "--- the tests run alongside (${SIDE_TESTS[*]}):"
    cat "$log"
    rm -f "$log"
    say "--- ${machine_tests[*]}: status $machine_status; the tests alongside: status $side_status"
    [ "$machine_status" = 0 ] && [ "$side_status" = 0 ]
}

if [ "$#" = 0 ] && [ "${TEST_SERIAL:-0}" != 1 ]; then
    run_split
else
    say "Running pytest (DATABASE_URL=$DATABASE_URL, REDIS_URL=$REDIS_URL)"
    run_pytest "$@"
fi
