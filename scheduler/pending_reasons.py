"""Pending reasons: a cycle's Pend decisions, written only where they changed, in batches.

Many reasons at once (``BESIDE_FROM`` and more, on PostgreSQL) are written by a thread of their own,
on its own connection, while the apply step writes the cycle's starts and preemptions
(``write_pends_beside``): at 5,000 nodes a first cycle changes 47,000 reasons, and writing them
after the rest made the apply step half a second longer than writing them alongside. Each batch then
commits on its own. That is safe because the two sets of rows never meet: a reason is written only
to a job that stays PENDING (``WHERE state = PENDING``), the starts and preemptions lock and write
other jobs, and the caller waits for the reasons before its transaction does anything else.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone

from django.db import DatabaseError, OperationalError, connection, transaction

from scheduler import announce, kept_rows, row_locks
from scheduler.bulkwrite import update_each, update_each_at_version
from scheduler.core.decisions import Pend, Preempt
from scheduler.models import MESSAGE_LENGTH, Job, JobState
from scheduler.snapshot import JobRow

log = logging.getLogger("scheduler.apply")


def pend_change(d: Pend, row: JobRow, now: float, vacated: float | None = None) -> tuple[str, str] | None:
    """The (reason, message) to store for a pending job, or None when it has not changed.
    ``now``: the cycle's time, in seconds since the epoch (the live policy's clock); ``vacated``:
    when the victims preempted for the job in this cycle are gone (``vacated_by``), which moves
    its expected end later if the policy's was earlier."""
    if vacated is not None and d.expected_at is not None and vacated > d.expected_at:
        d = replace(d, expected_at=vacated)
    reason, message = d.reason.value, stored_message(d, now)
    if row.state != JobState.PENDING or (reason, message) == (row.pending_reason, row.pending_message):
        return None
    return reason, message


def vacated_by(preempts: list[tuple[Preempt, JobRow]], notice: float) -> dict[str, float]:
    """For each job that victims are preempted for in this cycle, when the last of them is gone:
    their notice, stamped ``notice`` by the apply step, plus their grace period. The policy counted
    the grace from the cycle's instant, a little earlier (seconds, in a large cycle), and the next
    cycle counts it from the notice as stored: said from the notice now, the expected end shown
    to the job does not change between the two cycles."""
    ends: dict[str, float] = {}
    for d, row in preempts:
        if d.for_job is not None:
            end = notice + row.grace_period
            ends[d.for_job] = max(end, ends.get(d.for_job, end))
    return ends


def stored_message(d: Pend, now: float) -> str:
    """The message as stored and shown: the policy's, cut to length, then when the wait is expected
    to end (``Pend.expected_at``) as a date and time in UTC, or, once that is not after ``now``,
    that it is expected any moment.

    A time rather than a countdown: the text stays the same while the job waits, so its row is not
    rewritten (nor its page told to read it again) every cycle; it changes when the expected end
    does, and once more when the end has passed (a policy then expects it at ``now``)."""
    if d.expected_at is None:
        return d.message[:MESSAGE_LENGTH]
    suffix = f"; expected by {clock_text(d.expected_at)}" if d.expected_at > now else OVERDUE
    return d.message[:MESSAGE_LENGTH - len(suffix)] + suffix


#: What follows a message whose wait was expected to end by now.
OVERDUE = "; expected any moment (grace period over)"


@functools.lru_cache(maxsize=1024)  # a cycle's waiting jobs share few expected ends
def clock_text(seconds: float) -> str:
    """``seconds`` since the epoch as ``YYYY-MM-DD HH:MM:SS UTC``, rounded up to the second (never
    earlier than the time it names)."""
    return datetime.fromtimestamp(math.ceil(seconds), timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


PEND_BATCH = 5000


def write_pends(pends: dict[int, tuple[str, str]]) -> int:
    """Store pending reasons with one conditional UPDATE per batch of jobs, each row its own
    reason and message (``scheduler.bulkwrite``): with thousands of jobs waiting, an UPDATE per
    job, or per distinct message, made the cycle seconds long. Returns the rows written."""
    written, held = 0, False
    ids = sorted(pends)  # id order, as every writer of job rows
    changed_ids: list[int] = []
    for start in range(0, len(ids), PEND_BATCH):
        batch = {pk: pends[pk] for pk in ids[start:start + PEND_BATCH]}
        try:
            changed, held_here = _write_batch(batch)
            held = held or held_here
        except DatabaseError as exc:
            log.warning("pending reasons of %d jobs not written (next cycle retries): %s", len(batch), exc)
            continue
        if changed:
            # No JobEvent is written for a new reason. A job of the batch that left PENDING
            # meanwhile gets a hint too: harmless, a hint only makes a page re-read.
            changed_ids.extend(batch)
        written += changed
    if changed_ids:
        # Once for all batches: outside a transaction (``write_pends_beside``'s thread) each batch
        # commits on its own, and a hint per batch sent one message per shard of job pages each
        # time (at 47,000 reasons, ten rounds of them took 0.8 s of the thread).
        announce.jobs_changed(changed_ids)
    if ids:  # the next cycle's batches wait briefly while a row stays held
        row_locks.passed_over(PENDING_ROWS, held)
    return written


#: The kind of row lock (``scheduler.row_locks``) the reasons' writes take.
PENDING_ROWS = "pending jobs' rows"


def _write_batch(batch: dict[int, tuple[str, str]]) -> tuple[int, bool]:
    """One batch's UPDATE, in a savepoint (a deadlock loses only this batch's reasons), and whether
    a row was passed over. When a row of the batch is held by another transaction past the wait limit
    (``scheduler.row_locks``), the rows free then are written and the held ones keep their reasons
    until a later cycle."""
    fields, where = ["pending_reason", "pending_message"], {"state": JobState.PENDING}
    try:
        with transaction.atomic(), row_locks.waiting_at_most(PENDING_ROWS):
            versions = kept_rows.PENDING_ROWS.own_versions(batch)
            kept = update_each_at_version(Job, fields, batch, versions, where=where) if versions else {}
            written = len(kept) + update_each(Job, fields, {pk: v for pk, v in batch.items() if pk not in kept},
                                              where=where)
        _keep_written(kept, versions, batch)
        return written, False
    except OperationalError as exc:
        if not row_locks.is_lock_timeout(exc):
            raise
    with transaction.atomic():
        free, _ = row_locks.locked(Job.objects.filter(pk__in=list(batch), **where).order_by("pk")
                                   .values_list("pk", flat=True), what=PENDING_ROWS, wait=False)
        return update_each(Job, fields, {pk: batch[pk] for pk in free}, where=where), True


def _keep_written(kept: dict[int, str], versions: dict[int, str], batch: dict[int, tuple[str, str]]) -> None:
    """The process's kept pending rows (``scheduler.kept_rows``) take the reasons written to them, at
    their new versions: the cycle after one that wrote 47,000 reasons otherwise read every one of
    those rows again. Only rows written at the very version kept are (``update_each_at_version``)."""
    def change(pk: int, entry: kept_rows.Entry) -> None:
        reason, message = batch[pk]
        entry.row["pending_reason"], entry.row["pending_message"] = reason, message
        if entry.job_row is not None:
            entry.job_row.pending_reason, entry.job_row.pending_message = reason, message

    if kept:
        kept_rows.PENDING_ROWS.rewritten({pk: (versions[pk], new) for pk, new in kept.items()}, change)


#: From this many changed reasons on, ``write_pends_beside`` writes them from a thread of their own.
BESIDE_FROM = 2000


def write_pends_beside(pends: dict[int, tuple[str, str]]) -> Callable[[], int]:
    """Start writing ``pends`` (as ``write_pends``); returns the function that finishes: it waits for
    the writes and returns the rows written, re-raising what stopped the writer.

    Below ``BESIDE_FROM``, on a database other than PostgreSQL, or while the caller's rows are not
    visible to another connection (a test's transaction), that function writes them itself, in the
    caller's transaction, when called. Otherwise a thread writes them at once, each batch committed on
    its own (the module doc says why that is safe); the caller must finish before it writes anything
    else that a pending job's row could meet.
    """
    if len(pends) < BESIDE_FROM or connection.vendor != "postgresql" or _rows_may_be_uncommitted():
        return lambda: write_pends(pends)
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["written"] = write_pends(pends)
        except BaseException as exc:  # handed to the caller, which re-raises it
            outcome["error"] = exc
        finally:
            connection.close()  # this thread's own connection

    writer = threading.Thread(target=run, name="pending-reasons", daemon=True)
    writer.start()

    def finish() -> int:
        writer.join()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return int(outcome["written"])  # type: ignore[call-overload]

    return finish


def _rows_may_be_uncommitted() -> bool:
    """True unless the caller's transaction is the connection's outermost one (the loop's cycle):
    inside an enclosing transaction (a test wraps each test in one) the rows the cycle read may be
    uncommitted, invisible to another connection."""
    return len(connection.atomic_blocks) != 1
