"""Whether the configured database can be used, said in one line, and creating it when it is missing.

``scripts/serve.sh migrate`` runs ``manage.py ensure_database`` before ``migrate``, so that a
``DATABASE_URL`` naming a database that does not exist, or a PostgreSQL server that cannot be
reached, ends with one line that names the server and the database and says what to do, instead of
a traceback from deep inside the first migration. With ``--create`` (``scripts/up.sh`` passes it,
through ``GPUSCHED_CREATE_DATABASE=1``) a missing PostgreSQL database is created. Creation is not the
default: a mistyped database name in a deployment would otherwise start an empty portal beside the
real one.

Whether a database is missing is asked of the server (``pg_database``, through the maintenance
database ``postgres``), not read from the error's text, which the server words in its own language.
No message carries the password.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """``ok``: a connection was made. ``missing``: the server answers and has no database of that
    name. ``problem``: one line on what went wrong (empty when ``ok``)."""

    ok: bool
    missing: bool = False
    problem: str = ""


def where(connection: BaseDatabaseWrapper) -> str:
    """The database as people name it, without a password: ``database "gpusched" on 127.0.0.1:5432
    (user postgres)``, or the SQLite file."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"SQLite database {s['NAME']}"
    host = s.get("HOST") or "the local socket"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    user = f" (user {s['USER']})" if s.get("USER") else ""
    return f'database "{s["NAME"]}" on {host}{port}{user}'


def one_line(error: BaseException) -> str:
    """The error's text on one line: drivers put hints on lines of their own."""
    return "; ".join(part.strip() for part in str(error).splitlines() if part.strip()) or type(error).__name__


def check(connection: BaseDatabaseWrapper) -> DatabaseState:
    """Connect to the database once and say how that went (see ``DatabaseState``)."""
    try:
        connection.ensure_connection()
    except DatabaseError as error:
        failure = one_line(error)
    else:
        return DatabaseState(ok=True)
    if connection.vendor == "postgresql" and _exists(connection) is False:
        return DatabaseState(ok=False, missing=True, problem=f"{where(connection)} does not exist")
    return DatabaseState(ok=False, problem=f"cannot use the {where(connection)}: {failure}")


def create(connection: BaseDatabaseWrapper) -> None:
    """Create the (PostgreSQL) database the connection names; raises ``DatabaseError`` when the
    server refuses (no CREATEDB right, say)."""
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with _maintenance_cursor(connection) as cursor:
        cursor.execute(f"CREATE DATABASE {name}")


def create_command(connection: BaseDatabaseWrapper) -> str:
    """The shell command that creates the database by hand."""
    s = connection.settings_dict
    parts = ["createdb"]
    if s.get("HOST"):
        parts += ["-h", str(s["HOST"])]
    if s.get("PORT"):
        parts += ["-p", str(s["PORT"])]
    if s.get("USER"):
        parts += ["-U", str(s["USER"])]
    return " ".join(parts + [str(s["NAME"])])


def _exists(connection: BaseDatabaseWrapper) -> bool | None:
    """Whether the server has the database; None when the maintenance database cannot be reached
    either (the server is down, or refuses this user)."""
    try:
        with _maintenance_cursor(connection) as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [connection.settings_dict["NAME"]])
            return cursor.fetchone() is not None
    except DatabaseError:
        return None


@contextmanager
def _maintenance_cursor(connection: BaseDatabaseWrapper) -> Iterator[CursorWrapper]:
    """A cursor on the server's ``postgres`` database. Django falls back to the configured database
    when ``postgres`` cannot be reached, with a warning that would only repeat the error given."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with connection._nodb_cursor() as cursor:
            yield cursor
