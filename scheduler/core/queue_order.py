"""The order in which the queue policies consider pending jobs.

Within a class, a job of higher ``priority`` is considered first; among jobs of
equal priority the snapshot's arrival order (submit time, then job id) stands.
The sort is stable, so when every pending job has the same priority (the usual
case) the queue is exactly the snapshot's and the decisions are those of a
policy that knows nothing of priorities.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.core.model import PendingJob, Snapshot


def _descending_priority(job: PendingJob) -> int:
    return -job.spec.priority


def uniform_priority(snapshot: Snapshot) -> bool:
    """True when every pending job has the same priority. The snapshot's
    ``uniform_priority`` answers without a pass over the queue when the
    caller keeps it (the simulator); else the queue is scanned once."""
    known = snapshot.uniform_priority
    if known is not None:
        return known
    pending = snapshot.pending
    if not pending:
        return True
    first = pending[0].spec.priority
    for p in pending:  # a plain loop: a generator under all() costs twice as much per job
        if p.spec.priority != first:
            return False
    return True


def by_priority(jobs: Sequence[PendingJob], uniform: bool) -> Sequence[PendingJob]:
    """``jobs`` (in arrival order) with higher priorities first, arrival order
    kept among equals. ``uniform``: every job has the same priority, so the
    input is returned as it is (no copy, no sort)."""
    if uniform or len(jobs) < 2:
        return jobs
    return sorted(jobs, key=_descending_priority)
