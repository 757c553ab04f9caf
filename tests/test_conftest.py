"""The shared test policy: a missing service skips a test locally and fails it under CI=true."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
DB_TEST = "tests/portal/api/test_authentication.py::test_token_name_is_required"
REDIS_TEST = "tests/scheduler/test_triggers.py::test_request_scheduling_enqueues_run_cycle"
CLOSED_PORT_DB = "postgres://postgres@127.0.0.1:1/nothing"


def run_pytest(test_id: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"CI", "DATABASE_URL", "REDIS_URL", "TEST_REDIS_URL"}}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", test_id, "-q", "-p", "no:cacheprovider", "-rsf"],
                          env=environ, cwd=ROOT, capture_output=True, text=True, timeout=300)


# Under CI a missing service fails the test at setup, which pytest counts as an error.
LOCAL, CI = ("", 0, "1 skipped"), ("true", 1, "1 error")


@pytest.mark.parametrize("ci, code, outcome", [LOCAL, CI])
def test_unreachable_postgres(ci, code, outcome) -> None:
    result = run_pytest(DB_TEST, CI=ci, DATABASE_URL=CLOSED_PORT_DB)
    assert result.returncode == code, result.stdout[-2000:]
    assert outcome in result.stdout and "PostgreSQL at 127.0.0.1:1 is unreachable" in result.stdout


@pytest.mark.parametrize("ci, code, outcome", [LOCAL, CI])
def test_unreachable_redis(ci, code, outcome) -> None:
    database = os.environ.get("DATABASE_URL", "")
    if not database.startswith("postgres"):
        pytest.skip("needs DATABASE_URL=postgres://... so that only Redis is missing")
    # A database name of its own: the child must not replace this run's test database.
    own_database = urlparse(database)._replace(path="/gs_portal_missing_redis").geturl()
    result = run_pytest(REDIS_TEST, CI=ci, DATABASE_URL=own_database, REDIS_URL="redis://127.0.0.1:1/0")
    assert result.returncode == code, result.stdout[-2000:]
    assert outcome in result.stdout and "Redis at redis://127.0.0.1:1/0 is unreachable" in result.stdout


def test_ci_refuses_sqlite_for_database_tests(tmp_path) -> None:
    result = run_pytest(DB_TEST, CI="true", DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3")
    assert result.returncode == 1 and "CI runs the database tests on PostgreSQL" in result.stdout
