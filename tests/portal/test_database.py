"""The default database's settings (portal/database.py): persistent connections, SQLite's waits, the
web server's PostgreSQL pool (``DATABASE_POOL``), and that a real daphne with the pool, as
scripts/serve.sh web runs it, no longer opens a connection per request."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.livestack import _database_url

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def database_settings(**env: str) -> str:
    """The default database's connection settings as a fresh interpreter reads them from ``env``, or
    the last line of the error that stopped it."""
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    code = ("import portal.settings as s; d = s.DATABASES['default']; "
            "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'], d.get('OPTIONS', {}).get('pool'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env={**keep, "SECRET_KEY": "k", "DATABASE_URL": "postgres://u@db:5432/portal", **env})
    return result.stdout.strip() if result.returncode == 0 else result.stderr.strip().splitlines()[-1]


def test_workers_and_commands_keep_a_persistent_connection() -> None:
    assert database_settings() == "60 False None"


def test_the_pool_replaces_persistent_connections_and_checks_what_it_hands_out() -> None:
    assert database_settings(DATABASE_POOL="true", DATABASE_POOL_MAX_SIZE="8") == \
        "0 True {'min_size': 2, 'max_size': 8, 'timeout': 10}"


def test_a_bad_pool_setting_stops_start_up_naming_it() -> None:
    assert "DATABASE_POOL" in database_settings(DATABASE_POOL="sometimes")
    assert "DATABASE_POOL_MAX_SIZE" in database_settings(DATABASE_POOL="true", DATABASE_POOL_MAX_SIZE="0")


@pytest.mark.parametrize("pool, backoff", [("true", "1.0"), ("false", "2.0")])
def test_only_a_pooled_process_retries_a_lost_postgresql_every_second(pool: str, backoff: str) -> None:
    code = ("import django; django.setup(); from psycopg_pool.base import AttemptWithBackoff; "
            "print(AttemptWithBackoff.DELAY_BACKOFF)")
    keep = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG"}}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env={**keep, "SECRET_KEY": "k", "DATABASE_URL": "postgres://u@db:5432/portal",
                                 "DATABASE_POOL": pool, "DJANGO_SETTINGS_MODULE": "portal.settings"})
    assert result.stdout.strip() == backoff, result.stderr[-2000:]


def test_sqlite_has_no_pool_and_waits_for_writers(tmp_path: Path) -> None:
    from portal.database import default_database

    db = default_database(tmp_path / "db.sqlite3", {"DATABASE_POOL": "true", "DATABASE_URL": "sqlite:///x.sqlite3"})
    assert (db["CONN_MAX_AGE"], db["OPTIONS"]) == (60, {"timeout": 20, "transaction_mode": "IMMEDIATE"})
    assert default_database(tmp_path / "var" / "db.sqlite3", {})["NAME"] == str(tmp_path / "var" / "db.sqlite3")


def test_an_unusable_url_names_the_variable(tmp_path: Path) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from portal.database import default_database

    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL='nosuchdb://x'"):
        default_database(tmp_path / "db.sqlite3", {"DATABASE_URL": "nosuchdb://x"})


def test_serve_web_turns_the_pool_and_the_bounded_lock_wait_on() -> None:
    text = (ROOT / "scripts" / "serve.sh").read_text()
    assert ('DATABASE_POOL="${DATABASE_POOL:-true}" DATABASE_LOCK_WAIT_S="${DATABASE_LOCK_WAIT_S:-5}" \\\n'
            '            exec "$VENV/bin/python" -m portal.web_processes') in text


def _sessions(cursor) -> int:  # noqa: ANN001
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
    return int(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pool, most", [("true", 6), ("false", None)])
def test_daphne_with_the_pool_reuses_its_connections(pool: str, most: int | None, tmp_path: Path) -> None:
    from django.db import connection

    url = _database_url()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": "pool-test-secret", "DATABASE_POOL": pool,
           "ALLOWED_HOSTS": "127.0.0.1", "DEBUG": "0"}
    log = (tmp_path / "daphne.log").open("wb")
    daphne = subprocess.Popen([str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def get() -> int:
        # An API request with a token that does not exist: one token query per request, then 401.
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/jobs/",
                                         headers={"Authorization": "Token no-such-token"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                assert get() == 401
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline and daphne.poll() is None, (tmp_path / "daphne.log").read_text()
                time.sleep(0.2)
        with connection.cursor() as cursor:
            before = _sessions(cursor)
            assert [get() for _ in range(40)] == [401] * 40
            time.sleep(1.5)  # PostgreSQL's statistics trail a little
            opened = _sessions(cursor) - before
    finally:
        daphne.terminate()
        daphne.wait(timeout=30)
    if most is None:
        assert opened >= 40  # without the pool: one new connection per request (the cost the pool removes)
    else:
        assert opened <= most


def _run_pool_script(code: str, url: str) -> str:
    """The last line ``code`` prints in a fresh interpreter whose web server pools its connections."""
    env = {**os.environ, "DATABASE_URL": url, "DATABASE_POOL": "true", "SECRET_KEY": "pool-test-secret",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


SIX_DEAD_CONNECTIONS = """
import os, django, psycopg
django.setup()
from django.db import connection
pool = connection.pool
pool.open()
held = [pool.getconn() for _ in range(6)]
pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in held]
for c in held:
    pool.putconn(c)
with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as admin:
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
try:
    with connection.cursor() as cursor:  # as a request after a PostgreSQL restart asks
        cursor.execute("SELECT 1")
    print("answered")
except Exception as exc:
    print(type(exc).__name__)
"""


@pytest.mark.postgres
@pytest.mark.django_db
def test_after_a_restart_a_request_is_not_made_to_wait_through_every_dead_connection() -> None:
    # Six idle connections killed at once, as a PostgreSQL restart kills them: psycopg_pool checks
    # them one at a time, and doubling its waits (0 + 1 + 2 + 4 + 8 s) ran past the request's 10 s.
    assert _run_pool_script(SIX_DEAD_CONNECTIONS, _database_url()) == "answered"


RECONNECT_AFTER_AN_OUTAGE = """
import os, tempfile, time, psycopg
from psycopg_pool import ConnectionPool, PoolTimeout
from portal.database import retry_lost_postgresql_every_second
retry_lost_postgresql_every_second()
url = os.environ["DATABASE_URL"]
with psycopg.connect(url) as c:
    real = c.execute("SHOW unix_socket_directories").fetchone()[0].split(",")[0].strip()
    port = c.execute("SHOW port").fetchone()[0]
    dbname = c.info.dbname
outage = tempfile.mkdtemp()  # a socket directory where no PostgreSQL answers yet
pool = ConnectionPool(f"host={outage} port={port} dbname={dbname} user=postgres", min_size=1, open=False)
pool.open(wait=False)
time.sleep(8)  # failed attempts at about 0, 1, 3 and 7 s: doubling, the next would come at 15 s
os.symlink(os.path.join(real, f".s.PGSQL.{port}"), os.path.join(outage, f".s.PGSQL.{port}"))  # it is back
try:
    pool.getconn(timeout=4)
    print("connected")
except PoolTimeout:
    print("timed out")
"""


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_postgresql_back_after_an_outage_is_reached_within_a_request_s_wait() -> None:
    assert _run_pool_script(RECONNECT_AFTER_AN_OUTAGE, _database_url()) == "connected"


# --- a session idle inside a transaction ------------------------------------------------------------


def _postgres_options(tmp_path: Path, **env: str) -> dict:
    from portal.database import default_database

    return default_database(tmp_path / "db.sqlite3", {"DATABASE_URL": "postgres://u@db:5432/portal", **env}
                            ).get("OPTIONS", {})


KEEPALIVE_30 = ("-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3 "
                "-c tcp_user_timeout=60000")


def test_every_postgresql_session_ends_itself_after_a_minute_idle_in_a_transaction(tmp_path: Path) -> None:
    from portal.database import default_database

    def server(**env: str) -> object:
        return _postgres_options(tmp_path, DATABASE_KEEPALIVE_S="0", **env).get("options")

    assert server() == "-c idle_in_transaction_session_timeout=60000"
    assert server(DATABASE_IDLE_IN_TRANSACTION_S="5") == "-c idle_in_transaction_session_timeout=5000"
    assert server(DATABASE_IDLE_IN_TRANSACTION_S="0") is None
    assert server(DATABASE_POOL="true") == "-c idle_in_transaction_session_timeout=60000"
    db = default_database(tmp_path / "db.sqlite3", {"DATABASE_URL": "postgres://u@db/p?options=-c%20search_path%3Dx"})
    assert db["OPTIONS"]["options"] == f"-c search_path=x -c idle_in_transaction_session_timeout=60000 {KEEPALIVE_30}"
    assert "options" not in default_database(tmp_path / "db.sqlite3", {"DATABASE_URL": "sqlite:///x.sqlite3"})["OPTIONS"]


def test_both_ends_of_every_postgresql_connection_probe_a_silent_peer_after_30_s(tmp_path: Path) -> None:
    options = _postgres_options(tmp_path, DATABASE_IDLE_IN_TRANSACTION_S="0")
    assert options == {"options": KEEPALIVE_30, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                       "keepalives_count": 3, "tcp_user_timeout": 60000}
    fast = _postgres_options(tmp_path, DATABASE_IDLE_IN_TRANSACTION_S="0", DATABASE_KEEPALIVE_S="1")
    assert (fast["options"], fast["keepalives_interval"]) == (
        "-c tcp_keepalives_idle=1 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3 -c tcp_user_timeout=4000", 1)
    assert _postgres_options(tmp_path, DATABASE_IDLE_IN_TRANSACTION_S="0", DATABASE_KEEPALIVE_S="0") == {}


@pytest.mark.parametrize("variable", ["DATABASE_IDLE_IN_TRANSACTION_S", "DATABASE_KEEPALIVE_S"])
@pytest.mark.parametrize("value", ["-1", "soon", "1.5"])
def test_a_bad_session_limit_stops_start_up_naming_it(variable: str, value: str) -> None:
    assert variable in database_settings(**{variable: value})


def test_a_statement_of_the_web_server_waits_at_most_its_limit_for_a_held_row(tmp_path: Path) -> None:
    def server(**env: str) -> object:
        return _postgres_options(tmp_path, DATABASE_KEEPALIVE_S="0", DATABASE_IDLE_IN_TRANSACTION_S="0",
                                 **env).get("options")

    assert server() is None  # workers and commands wait as long as it takes
    assert server(DATABASE_LOCK_WAIT_S="5") == "-c lock_timeout=5000"
    assert server(DATABASE_LOCK_WAIT_S="0.25") == "-c lock_timeout=250"
    assert server(DATABASE_LOCK_WAIT_S="0") is None
    for value in ("-1", "soon", "inf"):
        assert "DATABASE_LOCK_WAIT_S" in database_settings(DATABASE_LOCK_WAIT_S=value)


def test_the_test_process_s_own_connection_has_no_such_limit() -> None:
    """pytest-django keeps it in a transaction for a whole test (portal/settings_test.py)."""
    from django.conf import settings

    assert "idle_in_transaction" not in str(settings.DATABASES["default"].get("OPTIONS", {}))


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgresql_ends_a_session_idle_in_a_transaction_and_its_locks_go_with_it() -> None:
    """What a process cut off in the middle of a transaction leaves behind: a session that holds a
    lock and says nothing. With the option every process connects with, PostgreSQL ends it."""
    import psycopg

    from portal.database import idle_in_transaction_option

    url = _database_url()
    stuck = psycopg.connect(url, options=idle_in_transaction_option(1))
    other = psycopg.connect(url, autocommit=True)
    try:
        stuck.execute("SELECT pg_advisory_xact_lock(424242)")
        assert other.execute("SELECT pg_try_advisory_lock(424242)").fetchone() == (False,)
        deadline = time.monotonic() + 30
        while other.execute("SELECT pg_try_advisory_lock(424242)").fetchone() != (True,):
            assert time.monotonic() < deadline, "the idle session still holds its lock"
            time.sleep(0.2)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            stuck.execute("SELECT 1")
    finally:
        stuck.close()
        other.close()
