"""What a scheduling cycle applied, and the savepoint each group of its writes runs in."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, transaction

from scheduler.transitions import Conflict

log = logging.getLogger("scheduler.apply")  # the cycle's log, as before these lived apart


@dataclass(slots=True)
class Applied:
    """What a cycle changed: job ids started and preempted, pending reasons rewritten,
    decisions skipped because the database had moved on (with why), kills sent for cancels."""

    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    reconfigured: list[int] = field(default_factory=list)
    pend_updates: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cancel_kills: list[int] = field(default_factory=list)

    def skip(self, job_id: int | str, why: str) -> None:
        self.skipped.append((str(job_id), why))
        log.info("job %s: decision skipped: %s", job_id, why)


def guarded(out: Applied, job_ids: list[str], write: Callable[[], None]) -> bool:
    """Run writes in a savepoint; a conflict or an error of the database undoes only them
    and skips the decisions about ``job_ids`` (their jobs wait for the next cycle).
    Returns whether the writes stand."""
    try:
        with transaction.atomic():
            write()
        return True
    except Conflict as exc:
        for job_id in job_ids:
            out.skip(job_id, str(exc))
    except DatabaseError as exc:  # a deadlock or serialization failure with a concurrent writer
        log.warning("decisions about %d jobs rolled back by the database: %s", len(job_ids), exc)
        for job_id in job_ids:
            out.skipped.append((str(job_id), f"database: {exc}"))
    return False
