"""The job id sequence, kept ahead of every id a node agent knows.

Agents know an attempt by ``(job id, attempt number)``. A database restored from a backup forgets
the jobs submitted after the backup, and its sequence would hand their ids out again: a new job
could be taken for a process of the forgotten one that an agent still runs (a launch it already runs
is a duplicate to the agent), refused as an old attempt, or ended by a repeated exit of the
forgotten job. ``manage.py advance_job_ids`` is the restore's step that prevents it (``advance``);
``catch_up`` is the safety net when that step was forgotten: a heartbeat that names a job id this
database has not issued yet moves the sequence past it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import connection, transaction

from scheduler.models import Job

log = logging.getLogger(__name__)

DEFAULT_GAP = 1_000_000
#: A reported id further than this past the sequence is not believed (a node's mistake or a hostile
#: agent must not be able to use up the id space); it is logged and nothing moves.
MAX_AHEAD = 10_000_000
#: Seconds a process trusts the sequence value it last read. Reading it is cheap but heartbeats are
#: many; an id below the value read is known to be issued. Bounded, because a restore under a running
#: worker lowers the sequence below what the worker read.
TRUST_SECONDS = 30.0
# Any constant: the advisory lock that serialises catching up between workers.
_LOCK_KEY = 0x6A6F6269647331

_issued: tuple[int, float] | None = None  # (sequence value, monotonic time read), per process


_sequence: str | None = None  # the job id sequence's name, which PostgreSQL gives once per database schema


def _sequence_and_table() -> tuple[str, str]:
    global _sequence
    table = Job._meta.db_table
    if _sequence is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            _sequence = cursor.fetchone()[0]
    return _sequence, table


def _last_value(sequence: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT last_value FROM {sequence}")  # a name PostgreSQL gave, not input
        return cursor.fetchone()[0]


def advance(gap: int, past: int = 0) -> int:
    """Set the job id sequence to ``max(highest id, sequence's last value, past) + gap``; return that value."""
    sequence, table = _sequence_and_table()
    last_value = _last_value(sequence)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {connection.ops.quote_name(table)}")
        highest = cursor.fetchone()[0]
        target = max(highest, last_value, past) + gap
        cursor.execute("SELECT setval(%s, %s)", [sequence, target])
    return target


def catch_up(reported: int, node: str, gap: int = DEFAULT_GAP,
             clock: Callable[[], float] = time.monotonic) -> int | None:
    """Make sure ``reported``, the highest job id a node's agent named, is an id this database issued.

    When it is above the sequence (the database was restored from a backup and ``advance_job_ids``
    was not run), the sequence moves to ``reported + gap`` and an error is logged; returns the new
    value, else None. Reads the sequence only when ``reported`` is above the value this process
    last read within ``TRUST_SECONDS``. PostgreSQL only (the deployment's database)."""
    global _issued
    if reported <= 0 or connection.vendor != "postgresql":
        return None
    now = clock()
    if _issued is not None and reported <= _issued[0] and now - _issued[1] < TRUST_SECONDS:
        return None
    sequence, _ = _sequence_and_table()
    last_value = _last_value(sequence)
    _issued = (last_value, now)
    if reported <= last_value:
        return None
    if reported > last_value + MAX_AHEAD:
        log.error("node %s names job id %d, more than %d past the last id this database issued (%d); "
                  "not believed, the job id sequence is left as it is", node, reported, MAX_AHEAD, last_value)
        return None
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        last_value = _last_value(sequence)  # another worker may have caught up meanwhile
        if reported <= last_value:
            _issued = (last_value, now)
            return None
        target = advance(gap, past=reported)
    _issued = (target, now)
    log.error("node %s names job id %d, which this database has not issued (the last was %d): it was restored "
              "from a backup without manage.py advance_job_ids; new job ids now start after %d", node, reported,
              last_value, target)
    return target


def forget_read_value() -> None:
    """Drop the sequence value this process read (tests; a process that knows the database changed)."""
    global _issued
    _issued = None
