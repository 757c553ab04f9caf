"""Row locks of the scheduling cycle that never wait long on another transaction.

The cycle locks the rows it writes: the jobs it starts or preempts, the GPUs it hands out, the
pending jobs whose reasons change. A row held briefly by another writer (an agent's report, a
cancellation, a second cycle) is waited for as before, so its result is read; a row held for
longer than ``SCHEDULER_ROW_LOCK_WAIT`` seconds (a transaction left open in a shell, a slow
report, a process frozen between two statements) is passed over: the cycle goes on with every
other row and only the job whose row is held waits for a later cycle. Without the limit one held
row stopped the starts of every user's jobs until its holder finished.

A row held that long is likely still held at the next cycle, and waiting the whole limit for it
again in every cycle would delay every start by as much. So once a statement of one kind (``what``:
job rows, GPU rows, ...) has passed over a row, the next statements of that kind in this process
wait at most ``BRIEF_WAIT_MS``, until one of them gets every row it asked for.

PostgreSQL only (``lock_timeout``, then ``SKIP LOCKED``); on other databases, or with the limit
set to 0, locks wait as long as it takes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.db.models import QuerySet

log = logging.getLogger("scheduler.apply")

#: PostgreSQL's SQLSTATE for a lock not granted within ``lock_timeout``.
LOCK_NOT_AVAILABLE = "55P03"

#: How long statements of a kind that passed over a held row wait, until one gets all its rows: long
#: enough for the writes that hold a row briefly (a report, a cancellation: a few milliseconds).
BRIEF_WAIT_MS = 50

#: The kinds of statement (``what``) whose last attempt in this process passed over a held row.
_held_before: set[str] = set()

#: While rows of a kind stay held, a warning is logged at most this often (the other cycles that pass
#: over them log at debug level), so a row held for hours does not write a warning every cycle.
WARN_EVERY_S = 60.0
_warned_at: dict[str, float] = {}


def wait_limit_ms() -> int:
    """The limit in milliseconds, 0 when locks wait without one (setting 0, or not PostgreSQL)."""
    if connection.vendor != "postgresql":
        return 0
    return max(0, round(float(getattr(settings, "SCHEDULER_ROW_LOCK_WAIT", 0.0)) * 1000))


def limit_ms(what: str | None = None) -> int:
    """The wait for a statement of kind ``what``: ``wait_limit_ms``, or at most ``BRIEF_WAIT_MS``
    while the last statement of that kind passed over a held row."""
    limit = wait_limit_ms()
    return min(limit, BRIEF_WAIT_MS) if what in _held_before else limit


def passed_over(what: str, held: bool) -> None:
    """Record whether the last statement of kind ``what`` passed over a held row."""
    if held:
        _held_before.add(what)
    else:
        _held_before.discard(what)
        _warned_at.pop(what, None)


def _log_passed_over(what: str, waited_ms: int) -> None:
    """A warning when rows of kind ``what`` are first passed over and every ``WARN_EVERY_S`` while
    they stay held; debug lines in between."""
    now = time.monotonic()
    last = _warned_at.get(what)
    if last is None or now - last >= WARN_EVERY_S:
        _warned_at[what] = now
        log.warning("%s held by another transaction for over %g s: passed over in this cycle%s", what,
                    waited_ms / 1000, "" if last is None else " (still held; said again every %g s)" % WARN_EVERY_S)
    else:
        log.debug("%s still held by another transaction: passed over in this cycle", what)


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` (as Django raises it) is a lock not granted within the limit."""
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) == LOCK_NOT_AVAILABLE


def _set_limit(value: str, *, local: bool) -> str:
    """Set ``lock_timeout`` for the transaction (``local``) or the session; returns the one it replaced."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, %s)", [value, local])
        return cursor.fetchone()[0]


@contextmanager
def waiting_at_most(what: str | None = None) -> Iterator[None]:
    """Within the block a statement waiting longer than ``limit_ms(what)`` for a lock fails with
    ``OperationalError`` (``is_lock_timeout``). Enter it inside a savepoint the error leaves
    (``transaction.atomic``): its rollback also restores the connection's own limit, which the
    block restores itself when it ends without an error."""
    limit = limit_ms(what)
    if not limit:
        yield
        return
    previous = _set_limit(f"{limit}ms", local=True)
    yield
    _set_limit(previous, local=True)


@contextmanager
def session_waiting_at_most() -> Iterator[None]:
    """``waiting_at_most`` for work that opens transactions of its own (an agent's report, outside
    any transaction when entered): the limit is set for the session and put back afterwards. A
    session that can no longer be told (its connection broke) is closed, to be opened afresh."""
    limit = wait_limit_ms()
    if not limit or connection.in_atomic_block:
        yield
        return
    previous = _set_limit(f"{limit}ms", local=False)
    try:
        yield
    finally:
        try:
            _set_limit(previous, local=False)
        except DatabaseError:
            connection.close()


def locked(rows: QuerySet, *, of: tuple[str, ...] = (), what: str = "rows",
           wait: bool = True) -> tuple[list[Any], bool]:
    """Lock ``rows`` (``SELECT ... FOR UPDATE``, in the queryset's order) and return them with
    whether some may have been passed over: rows another transaction held past the limit are left
    out (``wait=False``: rows held at all, at once; the caller already waited on them).

    Must run inside a transaction; ``what`` names the rows in the warning logged when some are
    passed over."""
    limit = limit_ms(what)
    if not limit:
        return list(rows.select_for_update(of=of)), False
    if wait:
        try:
            with transaction.atomic(), waiting_at_most(what):
                got = list(rows.select_for_update(of=of))
            passed_over(what, False)
            return got, False
        except OperationalError as exc:
            if not is_lock_timeout(exc):
                raise
    free = list(rows.select_for_update(of=of, skip_locked=True))
    passed_over(what, True)
    _log_passed_over(what, limit)  # with wait=False, the limit the caller waited with
    return free, True


__all__ = ["BRIEF_WAIT_MS", "is_lock_timeout", "limit_ms", "locked", "passed_over", "session_waiting_at_most",
           "wait_limit_ms", "waiting_at_most"]
