"""Pending jobs' rows kept between the cycles of one process, read again only where a row changed.

At 50,000 pending jobs, reading every pending row and building its ``JobSpec`` was most of a
cycle's snapshot, although between two cycles few of those rows change. Each cycle now reads,
in submission order, every pending job's id and *row version*, and reads whole rows only for the
jobs whose version it has not kept.

The version is PostgreSQL's ``xmin`` and ``ctid`` of the job's row and of its project's row (the
snapshot reads the project's name). Every UPDATE writes a new tuple: ``xmin`` names the
transaction that wrote it and ``ctid`` where it lies, and the old tuple's place cannot be reused
while the transaction that replaced it is open, so the pair differs for every version of a row,
even between two updates within one transaction. A row read after the versions is at least as new
as its version (it is then read once more next cycle, never less). What a row kept here is built
into (the apply step's ``JobRow``, the job's spec) is kept beside it and goes with it.

Only on PostgreSQL (elsewhere every cycle reads every row, as before). The kept rows are dropped
every ``MAX_AGE_S`` seconds and whenever the database changes, so nothing outlives a restore or
a transaction-id wraparound by more than that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

Row = dict[str, Any]

MAX_AGE_S = 600.0
"""Seconds after which every kept row is read again: a bound on anything the version misses."""

FULL_READ_SHARE = 0.5
"""Share of changed rows from which every pending row is read (one query on the state) rather
than the changed ones by id: a first cycle, or one after most pending reasons changed."""


class Entry:
    """One pending job as kept: its row and version, and what the snapshot built from them
    (``job_row`` and ``spec``, None until built; ``spec`` stays None for jobs whose spec depends
    on more than the row, which are built every cycle)."""

    __slots__ = ("version", "row", "job_row", "spec")

    def __init__(self, version: str, row: Row) -> None:
        self.version, self.row = version, row
        self.job_row: Any = None
        self.spec: Any = None


def _versions_sql() -> str:
    from scheduler.models import Job

    project = Job._meta.get_field("project").related_model._meta.db_table
    return (
        f'SELECT j.id, j.xmin::text || \',\' || j.ctid::text || \',\' || '
        f'COALESCE(p.xmin::text || \',\' || p.ctid::text, \'\') '
        f'FROM "{Job._meta.db_table}" j LEFT JOIN "{project}" p ON p.id = j.project_id '
        f"WHERE j.state = %s ORDER BY j.submitted_at, j.id"
    )


class PendingRows:
    """The kept rows of one process. ``current`` is safe to call from several threads."""

    def __init__(self) -> None:
        self._kept: dict[int, Entry] = {}
        self._since = 0.0
        self._database: object = None
        self._lock = threading.Lock()
        self.reads = 0
        """Rows read whole over the process's life (for tests and benchmarks)."""

    def clear(self) -> None:
        with self._lock:
            self._kept = {}

    def current(self, read: Callable[[list[int] | None], list[Row]]) -> list[Entry]:
        """Every pending job's entry in submission order. ``read(ids)`` returns the rows of those
        pending jobs (``None``: of every pending job), each with its ``id``; a job it no longer
        returns left PENDING meanwhile and is left out of this cycle."""
        from scheduler.models import JobState

        if connection.vendor != "postgresql":
            rows = read(None)
            self.reads += len(rows)
            return [Entry("", row) for row in rows]
        with connection.cursor() as cursor:
            cursor.execute(_versions_sql(), [JobState.PENDING])
            versions = cursor.fetchall()
        with self._lock:
            return self._refresh(versions, read)

    def _refresh(self, versions: list[tuple[int, str]], read: Callable[[list[int] | None], list[Row]]) -> list[Entry]:
        database = (connection.settings_dict.get("HOST"), connection.settings_dict.get("PORT"),
                    connection.settings_dict.get("NAME"))
        now = time.monotonic()
        if database != self._database or now - self._since > MAX_AGE_S:
            self._kept, self._database, self._since = {}, database, now
        kept = self._kept
        changed = [pk for pk, version in versions if (e := kept.get(pk)) is None or e.version != version]
        if changed:
            rows = read(None if len(changed) >= FULL_READ_SHARE * len(versions) else changed)
            self.reads += len(rows)
            fresh = {row["id"]: row for row in rows}
            wanted = dict(versions)
            for pk in changed:
                row = fresh.get(pk)
                if row is not None:
                    kept[pk] = Entry(wanted[pk], row)
                else:
                    kept.pop(pk, None)
        out = [e for pk, _ in versions if (e := kept.get(pk)) is not None]
        if len(kept) > len(out):  # jobs that left PENDING
            self._kept = {int(e.row["id"]): e for e in out}
        return out


PENDING_ROWS = PendingRows()
"""The process's kept pending rows (the loop's and the forecasts' snapshots share them)."""
