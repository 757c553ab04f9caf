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


def test_serve_web_turns_the_pool_on() -> None:
    text = (ROOT / "scripts" / "serve.sh").read_text()
    assert 'DATABASE_POOL="${DATABASE_POOL:-true}" exec "$VENV/bin/daphne"' in text


def _sessions(cursor) -> int:  # noqa: ANN001
    cursor.execute("SELECT pg_stat_clear_snapshot()")
    cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
    return int(cursor.fetchone()[0])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pool, most", [("true", 6), ("false", None)])
def test_daphne_with_the_pool_reuses_its_connections(pool: str, most: int | None, tmp_path: Path) -> None:
    from django.db import connection

    settings = connection.settings_dict
    url = f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
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
