"""The default database's settings, from the environment (``portal.settings`` calls ``default_database``).

``DATABASE_URL`` names the database (SQLite at ``var/db.sqlite3`` when unset). Processes keep one
persistent connection each (``CONN_MAX_AGE`` 60 s), except the web server, which takes its
PostgreSQL connections from a pool (``DATABASE_POOL``, which ``scripts/serve.sh web`` sets; at most
``DATABASE_POOL_MAX_SIZE`` connections): under ASGI every request runs in a thread of its own, so a
persistent connection is never reused there and each request opened a new one (a PostgreSQL backend
started and torn down per request). Workers keep persistent connections because a pool's threads
would not survive Celery's fork. A pooled connection is checked as it is handed out, so after a
PostgreSQL restart a request gets a new connection instead of a dead one, and a lost PostgreSQL is
tried again every second (``retry_lost_postgresql_every_second``, which the portal app calls when
it starts with a pool).

Every PostgreSQL session ends itself when it sits idle inside a transaction for
``DATABASE_IDLE_IN_TRANSACTION_S`` seconds (default 60; 0 turns it off): see
``idle_in_transaction_option``. Both ends of every connection probe a silent peer after
``DATABASE_KEEPALIVE_S`` seconds (default 30; 0: the system's two hours): see ``keepalive_options``.
A statement waits at most ``DATABASE_LOCK_WAIT_S`` seconds for a row lock another transaction holds
(default 0: as long as it takes; ``scripts/serve.sh web`` sets 5 for the web server): see
``lock_wait_option``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_float, env_int, env_str

PERSISTENT_S = 60
POOL_TIMEOUT_S = 10
IDLE_IN_TRANSACTION_S = 60
KEEPALIVE_S = 30
KEEPALIVE_PROBES = 3


def retry_lost_postgresql_every_second() -> None:
    """Keep psycopg_pool's waits between two attempts at about a second instead of doubling them.

    The pool doubles its wait after every failed attempt to reconnect (1, 2, 4, 8, 16 s, ...), so
    after PostgreSQL had been down for some seconds the next attempt could fall beyond the
    ``POOL_TIMEOUT_S`` a request waits for a connection: the first requests after PostgreSQL came
    back failed with ``PoolTimeout`` although it was up. The same doubling spaces the checks of the
    connections it hands out, so a request after a restart that found six dead connections idle
    waited 0 + 1 + 2 + 4 + 8 s for a live one; now about one second per dead connection. One
    attempt a second per lost connection costs PostgreSQL nothing worth counting while it is down.
    """
    from psycopg_pool.base import AttemptWithBackoff

    AttemptWithBackoff.DELAY_BACKOFF = 1.0


def idle_in_transaction_option(seconds: int) -> str:
    """The libpq ``options`` that make PostgreSQL end this session once it has been idle inside a
    transaction for ``seconds`` ("" for 0: never).

    A process that stops talking in the middle of a transaction (hung or frozen between two
    statements, or its host cut off) keeps every row lock it took: PostgreSQL notices a vanished
    host through TCP keepalives (``keepalive_options``; two hours without them), but the kernel of
    a process that is alive and stuck answers them for as long as it stays stuck. Meanwhile the
    scheduling loop waits on the first of those rows it must write (a start, a pending reason) and
    every agent report about that job waits too, each holding a worker process. Ended by the
    server, the session gives its locks back, its transaction is rolled back (nothing
    half-written), and the process gets an error on its next statement, as after any lost
    connection. No transaction of the portal or the workers waits on anything but the database for
    longer than a few seconds.
    """
    return f"-c idle_in_transaction_session_timeout={seconds * 1000}" if seconds > 0 else ""


def lock_wait_option(seconds: float) -> str:
    """The libpq ``options`` that make a statement of this session fail (SQLSTATE 55P03, which
    ``portal.held_rows`` answers with 503) once it has waited ``seconds`` for a lock another
    transaction holds ("" for 0: wait as long as it takes).

    For the web server: a request that must write a row someone else holds (a job an agent's report
    is recording, a user's row that a ``psql`` session left in ``BEGIN`` keeps locked) would otherwise
    wait as long as the holder, and with it one of the server's threads and pooled connections; enough
    such requests and every user's pages hang. Bounded, only the requests that touch the held row fail,
    with an answer that says to try again, and nothing of theirs is written. The workers keep waiting:
    the scheduling cycle has its own, shorter limit (``SCHEDULER_ROW_LOCK_WAIT``) and passes over held
    rows, and a task failing on a lock would lose its work where a request is simply sent again.
    """
    return f"-c lock_timeout={round(seconds * 1000)}" if seconds > 0 else ""


def keepalive_options(seconds: int) -> tuple[str, dict[str, int]]:
    """TCP keepalives for a connection, as (server ``options``, client libpq parameters); ("", {}) for 0.

    A peer that vanished without closing (its host cut off or powered off) is noticed only by
    probing it: without this, after the system's default two hours, or about fifteen minutes of
    retransmissions when it vanished while data to it was unacknowledged. On the server, every
    session of a portal host that died holds a connection slot meanwhile (a pool keeps up to 20
    per web process), so a replacement host can find ``max_connections`` used up; on a worker, a
    query whose answer never comes waits as long. Each end sends its first probe after
    ``seconds`` of silence, ``KEEPALIVE_PROBES`` of them a third of that apart, and gives up once
    the peer has answered nothing (probe or data) for about twice ``seconds`` (the TCP user timeout).
    """
    if seconds <= 0:
        return "", {}
    interval = max(1, seconds // KEEPALIVE_PROBES)
    give_up_ms = 1000 * (seconds + KEEPALIVE_PROBES * interval)
    server = (f"-c tcp_keepalives_idle={seconds} -c tcp_keepalives_interval={interval} "
              f"-c tcp_keepalives_count={KEEPALIVE_PROBES} -c tcp_user_timeout={give_up_ms}")
    return server, {"keepalives": 1, "keepalives_idle": seconds, "keepalives_interval": interval,
                    "keepalives_count": KEEPALIVE_PROBES, "tcp_user_timeout": give_up_ms}


def default_database(default_sqlite: Path, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """``DATABASES["default"]``; ImproperlyConfigured naming the variable when one is unusable."""
    url = env_str("DATABASE_URL", environ=environ)
    if url is None:
        default_sqlite.parent.mkdir(exist_ok=True)
        url = f"sqlite:///{default_sqlite}"
    try:
        db = dj_database_url.parse(url, conn_max_age=PERSISTENT_S)
    except Exception as exc:  # dj-database-url raises several types for bad URLs
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} is not usable: {exc}") from None
    if db["ENGINE"].endswith("sqlite3"):
        # Wait for a concurrent writer instead of failing at once, and take the write lock when a
        # transaction begins: the web server and the Celery processes write at once, and a transaction
        # that upgrades from read to write fails at once with "database is locked" instead of waiting.
        db.setdefault("OPTIONS", {}).update(timeout=20, transaction_mode="IMMEDIATE")
    if db["ENGINE"].endswith("postgresql"):
        idle = env_int("DATABASE_IDLE_IN_TRANSACTION_S", IDLE_IN_TRANSACTION_S, environ=environ, minimum=0)
        server, client = keepalive_options(env_int("DATABASE_KEEPALIVE_S", KEEPALIVE_S, environ=environ, minimum=0))
        options = db.setdefault("OPTIONS", {})
        options.update(client)
        lock_wait = env_float("DATABASE_LOCK_WAIT_S", 0.0, environ=environ, minimum=0)
        server = " ".join(o for o in (options.get("options"), idle_in_transaction_option(idle),
                                      lock_wait_option(lock_wait), server) if o)
        if server:
            options["options"] = server
    if env_bool("DATABASE_POOL", default=False, environ=environ) and db["ENGINE"].endswith("postgresql"):
        db["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
        db["CONN_HEALTH_CHECKS"] = True  # with a pool: psycopg_pool's check on each hand-out
        db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 2, "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20, environ=environ, minimum=1),
            "timeout": POOL_TIMEOUT_S,
        }
    return db
