"""Pending reasons: a cycle's Pend decisions, written only where they changed, in batches."""

from __future__ import annotations

import logging

from django.db import DatabaseError, transaction

from scheduler import announce
from scheduler.bulkwrite import update_each
from scheduler.core.decisions import Pend
from scheduler.models import MESSAGE_LENGTH, Job, JobState
from scheduler.snapshot import JobRow

log = logging.getLogger("scheduler.apply")


def pend_change(d: Pend, row: JobRow) -> tuple[str, str] | None:
    """The (reason, message) to store for a pending job, or None when it has not changed."""
    reason, message = d.reason.value, d.message[:MESSAGE_LENGTH]
    if row.state != JobState.PENDING or (reason, message) == (row.pending_reason, row.pending_message):
        return None
    return reason, message


PEND_BATCH = 5000


def write_pends(pends: dict[int, tuple[str, str]]) -> int:
    """Store pending reasons with one conditional UPDATE per batch of jobs, each row its own
    reason and message (``scheduler.bulkwrite``): with thousands of jobs waiting, an UPDATE per
    job, or per distinct message, made the cycle seconds long. Returns the rows written."""
    written = 0
    ids = sorted(pends)  # id order, as every writer of job rows
    for start in range(0, len(ids), PEND_BATCH):
        batch = {pk: pends[pk] for pk in ids[start:start + PEND_BATCH]}
        try:
            with transaction.atomic():  # a savepoint: a deadlock loses only this batch's reasons
                changed = update_each(Job, ["pending_reason", "pending_message"], batch,
                                      where={"state": JobState.PENDING})
        except DatabaseError as exc:
            log.warning("pending reasons of %d jobs not written (next cycle retries): %s", len(batch), exc)
            continue
        if changed:
            # No JobEvent is written for a new reason. A job of the batch that left PENDING
            # meanwhile gets a hint too: harmless, a hint only makes a page re-read.
            announce.jobs_changed(batch)
        written += changed
    return written
