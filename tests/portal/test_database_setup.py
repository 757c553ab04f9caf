"""A missing or unreachable database is said in one line; a missing one is created only when asked.

Against the real PostgreSQL of the test run: each test names a database that does not exist yet and
drops it afterwards. The command is run as ``scripts/serve.sh migrate`` runs it, in a process of
its own with ``DATABASE_URL`` set."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection, connections

from portal import database_setup

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="creating databases needs PostgreSQL"),
]


def _wrapper(name: str, **changes: object):  # type: ignore[no-untyped-def]
    """A connection like the test run's, to another database (or server)."""
    return type(connections["default"])({**connection.settings_dict, "NAME": name, **changes}, alias=f"probe_{name}")


def _drop(name: str) -> None:
    with connection._nodb_cursor() as cursor:
        # FORCE: a probe's connection may still be open (PostgreSQL 13 and later).
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")


@pytest.fixture
def missing_name() -> Iterator[str]:
    name = f"gs_setup_{uuid.uuid4().hex[:10]}"
    yield name
    _drop(name)


def _url(name: str, port: object = None) -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{port or s.get('PORT') or 5432}/{name}"


def _command(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": os.environ.get("SECRET_KEY", "test-setup"), **env}
    return subprocess.run([sys.executable, "manage.py", "ensure_database", *args], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=60)


def test_an_existing_database_is_ok() -> None:
    assert database_setup.check(connection) == database_setup.DatabaseState(ok=True)


def test_a_missing_database_is_told_apart_from_other_failures(missing_name: str) -> None:
    probe = _wrapper(missing_name)
    state = database_setup.check(probe)
    assert (state.ok, state.missing) == (False, True)
    assert state.problem == f'database "{missing_name}" on {database_setup.where(probe).split(" on ", 1)[1]} does not exist'
    database_setup.create(probe)
    assert database_setup.check(_wrapper(missing_name)).ok


def test_an_unreachable_server_is_a_problem_not_a_missing_database() -> None:
    state = database_setup.check(_wrapper("anything", HOST="127.0.0.1", PORT="1"))
    assert (state.ok, state.missing) == (False, False)
    assert state.problem.startswith('cannot use the database "anything" on 127.0.0.1:1')
    assert "\n" not in state.problem


def test_no_message_carries_the_password() -> None:
    probe = _wrapper("anything", HOST="127.0.0.1", PORT="1", PASSWORD="s3cret-pw")
    assert "s3cret-pw" not in database_setup.check(probe).problem
    assert "s3cret-pw" not in database_setup.where(probe)


def test_the_command_refuses_a_missing_database_in_one_line_and_creates_nothing(missing_name: str) -> None:
    done = _command(_url(missing_name))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert f'database "{missing_name}"' in lines[0] and "createdb" in lines[0] and missing_name in lines[0]
    assert database_setup.check(_wrapper(missing_name)).missing


def test_the_command_creates_a_missing_database_when_asked(missing_name: str) -> None:
    done = _command(_url(missing_name), "--create")
    assert done.returncode == 0, done.stderr
    assert "which did not exist" in done.stdout
    assert database_setup.check(_wrapper(missing_name)).ok
    again = _command(_url(missing_name), "--create")
    assert (again.returncode, again.stdout) == (0, "")


def test_the_command_names_an_unreachable_server() -> None:
    done = _command(_url("anything", port=1))
    assert done.returncode == 1
    assert done.stderr.strip().startswith('CommandError: cannot use the database "anything" on')
    assert "Traceback" not in done.stderr


def test_serve_migrate_stops_before_migrating_a_missing_database(missing_name: str) -> None:
    environ = {**os.environ, "DATABASE_URL": _url(missing_name), "SECRET_KEY": "test-setup"}
    environ.pop("GPUSCHED_CREATE_DATABASE", None)
    done = subprocess.run(["bash", "scripts/serve.sh", "migrate"], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert database_setup.check(_wrapper(missing_name)).missing
