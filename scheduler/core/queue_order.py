"""The order in which the queue policies consider pending jobs.

Within a class, a job of higher ``priority`` is considered first; among jobs of
equal priority the snapshot's arrival order (submit time, then job id) stands.
The sort is stable, so when every pending job has the same priority (the usual
case) the queue is exactly the snapshot's and the decisions are those of a
policy that knows nothing of priorities.

With fair share on (the snapshot carries ``tenants``), the BE queue is in
fair order instead and TE jobs beyond their tenant's TE bound queue as BE
(``scheduler.core.fair_queue``). ``queues`` builds both queues for a policy's
``decide``, and ``considered_order`` the same queues as one list, which
is what a queue policy's ``queue_order`` returns for the queue positions
shown to users (``class_orders`` splits it by class): one source, so that a
position never disagrees with what the policy does.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.core.fair_queue import FairView
from scheduler.core.model import JobClass, PendingJob, Snapshot


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


def queues(snapshot: Snapshot, te_jobs: Sequence[PendingJob]
           ) -> tuple[Sequence[PendingJob], Sequence[PendingJob], FairView | None]:
    """``(te, be, fair)``: the cycle's queues as a policy considers them.

    ``te_jobs``: the policy's TE queue in arrival order (empty for a policy
    that serves every job from one queue). ``te``: those jobs by priority;
    with fair share only those within their tenant's TE bound. ``be``: every
    pending job, by priority or, with fair share, in fair order; the jobs of
    ``te`` are among them and the BE pass skips them. ``fair``: the tenants'
    standing, None without fair share."""
    uniform = uniform_priority(snapshot)
    te = by_priority(te_jobs, uniform)
    if snapshot.tenants is None:
        return te, by_priority(snapshot.pending, uniform), None
    fair = FairView(snapshot, snapshot.tenants)
    return fair.bound_te(te)[0], fair.order(snapshot.pending), fair


def considered_order(snapshot: Snapshot, te_jobs: Sequence[PendingJob]) -> list[PendingJob]:
    """Every pending job in the order a queue policy with the TE queue ``te_jobs``
    considers them: the TE queue (within each tenant's TE bound), then the BE
    queue without those jobs. For ``QueuePolicy.queue_order``."""
    te, be, _ = queues(snapshot, te_jobs)
    if not te:
        return list(be)
    first = {p.spec.id for p in te}
    return [*te, *(p for p in be if p.spec.id not in first)]


def class_orders(order: Sequence[PendingJob]) -> dict[JobClass, list[PendingJob]]:
    """Each class's jobs of ``order`` (every pending job as a policy considers
    them: its ``queue_order``), in that order: a job's queue position is its
    place among the jobs of its class."""
    split: dict[JobClass, list[PendingJob]] = {JobClass.TE: [], JobClass.BE: []}
    for p in order:
        split[p.spec.job_class].append(p)
    return split
