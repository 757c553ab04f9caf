"""Job rows kept between the cycles of one process, read again only where a row changed.

At 5,000 nodes and 50,000 pending jobs, reading every pending and running job's rows and
building their core objects was most of a cycle's snapshot, although between two cycles few of
those rows change. Each cycle now reads, in the snapshot's order, every such job's id and *row
version*, and reads whole rows only for the jobs whose version it has not kept.

The version is PostgreSQL's ``xmin`` and ``ctid`` of each row the snapshot reads for the job:
the job's, its project's (for its name) and, for a job holding GPUs, its current attempt's.
Every UPDATE writes a new tuple: ``xmin`` names the transaction that wrote it and ``ctid`` where
it lies, and the old tuple's place cannot be reused while the transaction that replaced it is
open, so the pair differs for every version of a row, even between two updates within one
transaction. A row read after its version is at least as new as that version (it is then read
once more next cycle, never less). What the snapshot builds from a kept row (``Entry.built``)
is kept beside it and goes with it.

Only on PostgreSQL (elsewhere every cycle reads every row, as before). The kept rows are dropped
every ``MAX_AGE_S`` seconds and whenever the database changes, so nothing outlives a restore or
a transaction-id wraparound by more than that.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.db import connection

from scheduler.bulkwrite import tuple_version

MAX_AGE_S = 600.0
"""Seconds after which every kept row is read again: a bound on anything the version misses."""

FULL_READ_SHARE = 0.5
"""Share of changed rows from which every row is read (one query on the state) rather than the
changed ones by id: a first cycle, or one after most pending reasons changed."""

Reader = Callable[[list[int] | None, bool], dict[int, tuple[str, Any]]]
"""``read(ids, versioned)``: ``(version, row)`` (a row: any object) of those jobs, by id, if still
in the states read (``None``: of every job in them, in the order of the versions query); a job it
does not return is left out of this cycle. The version is read with the row when ``versioned``
(``row_version``), else it is ``""``."""


class Entry:
    """One job as kept: its version and row, and what the snapshot built from them (``job_row``:
    the apply step's row; ``built``: the core's view, or None while not built or not kept)."""

    __slots__ = ("version", "row", "job_row", "built")

    def __init__(self, version: str, row: Any) -> None:
        self.version, self.row = version, row
        self.job_row: Any = None
        self.built: Any = None


def _version(alias: str) -> str:
    return f"COALESCE({tuple_version(alias)}, '')"  # '' for a job without a project, or an attempt


def row_version(*aliases: str) -> str:
    """The SQL expression of the version of the rows of ``aliases`` (tables, or their aliases
    in a query), in that order: the job's, its project's, then its attempt's."""
    return " || '/' || ".join(_version(a) for a in aliases)


@functools.cache  # two distinct queries per process: built once each
def versions_sql(with_attempt: bool, order: str) -> str:
    """The query of (id, version) of the jobs in the states of its one parameter (an array)."""
    from scheduler.models import Attempt, Job

    project = Job._meta.get_field("project").related_model._meta.db_table
    attempt = (f'LEFT JOIN "{Attempt._meta.db_table}" a ON a.job_id = j.id AND a.number = j.attempt_count '
               if with_attempt else "")
    parts = row_version("j", "p", *(("a",) if with_attempt else ()))
    return (f'SELECT j.id, {parts} FROM "{Job._meta.db_table}" j '
            f'LEFT JOIN "{project}" p ON p.id = j.project_id {attempt}'
            f"WHERE j.state = ANY(%s) ORDER BY {order}")


class KeptRows:
    """The kept rows of one process for jobs in ``states``. ``current`` may be called from
    several threads."""

    def __init__(self, states: Callable[[], list[str]], with_attempt: bool, order: str) -> None:
        self._states, self._with_attempt, self._order = states, with_attempt, order
        self._kept: dict[int, Entry] = {}
        self._since = 0.0
        self._database: object = None
        self._lock = threading.Lock()
        self.reads = 0
        """Rows read whole over the process's life (for tests and benchmarks)."""

    def clear(self) -> None:
        with self._lock:
            self._kept = {}

    def current(self, read: Reader) -> list[Entry]:
        """Every job's entry, in the order of the versions query."""
        if connection.vendor != "postgresql":
            rows = read(None, False)
            self.reads += len(rows)
            return [Entry("", row) for _, row in rows.values()]
        with self._lock:
            if not self._kept or self._stale():  # nothing to compare with: the versions come with the rows
                return self._first(read)
        with connection.cursor() as cursor:
            cursor.execute(versions_sql(self._with_attempt, self._order), [self._states()])
            versions = cursor.fetchall()
        with self._lock:
            return self._refresh(versions, read)

    def own_versions(self, ids: Iterable[int]) -> dict[int, str]:
        """The version of the job's own row (the first part of its kept version; ``bulkwrite.ROW_VERSION``)
        of each job of ``ids`` kept (none on a database other than PostgreSQL)."""
        with self._lock:
            kept = self._kept
            return {pk: e.version.partition("/")[0] for pk in ids if (e := kept.get(pk)) is not None and e.version}

    def rewritten(self, versions: Mapping[int, tuple[str, str]], change: Callable[[int, Entry], None]) -> int:
        """Keep what this process wrote to job rows it keeps, instead of reading them again next cycle:
        for each ``pk: (old, new)`` of ``versions`` (the job row's own version before and after the
        write, which wrote only where the row was still at ``old``), the entry kept at ``old`` gets
        ``new`` and ``change(pk, entry)`` applies the written values to its row. Returns the entries
        changed. An entry read again meanwhile (at another version) is left alone; a write that
        rolls back leaves the database at ``old``, which the next cycle's versions then show."""
        changed = 0
        with self._lock:
            for pk, (old, new) in versions.items():
                entry = self._kept.get(pk)
                if entry is None:
                    continue
                own, slash, rest = entry.version.partition("/")
                if own == old:
                    entry.version = new + slash + rest
                    change(pk, entry)
                    changed += 1
        return changed

    def _first(self, read: Reader) -> list[Entry]:
        """Every row read whole, with its version (a first cycle, or one after ``MAX_AGE_S``)."""
        self._database, self._since = _database(), time.monotonic()
        fresh = read(None, True)
        self.reads += len(fresh)
        self._kept = {pk: Entry(version, row) for pk, (version, row) in fresh.items()}
        return list(self._kept.values())

    def _stale(self) -> bool:
        return self._database != _database() or time.monotonic() - self._since > MAX_AGE_S

    def _refresh(self, versions: list[tuple[int, str]], read: Reader) -> list[Entry]:
        kept = self._kept
        changed = [pk for pk, version in versions if (e := kept.get(pk)) is None or e.version != version]
        if changed:
            fresh = read(None if len(changed) >= FULL_READ_SHARE * len(versions) else changed, False)
            self.reads += len(fresh)
            wanted = dict(versions)
            for pk in changed:
                got = fresh.get(pk)
                if got is not None:
                    kept[pk] = Entry(wanted[pk], got[1])
                else:
                    kept.pop(pk, None)
        out = [e for pk, _ in versions if (e := kept.get(pk)) is not None]
        if len(kept) > len(out):  # jobs that left the states read
            self._kept = {pk: kept[pk] for pk, _ in versions if pk in kept}
        return out


def _database() -> tuple:
    """The database the process reads (kept rows of another are never compared with it)."""
    return connection.settings_dict.get("HOST"), connection.settings_dict.get("PORT"), connection.settings_dict.get("NAME")


def _pending_states() -> list[str]:
    from scheduler.models import JobState

    return [str(JobState.PENDING)]


def _active_states() -> list[str]:
    from scheduler.models import ACTIVE_STATES

    return [str(s) for s in ACTIVE_STATES]


PENDING_ROWS = KeptRows(_pending_states, with_attempt=False, order="j.submitted_at, j.id")
"""The process's kept PENDING jobs, in submission order (the loop's and the forecasts' snapshots
share them)."""

ACTIVE_ROWS = KeptRows(_active_states, with_attempt=True, order="j.id")
"""The process's kept jobs holding GPUs, each with its current attempt, in id order."""
