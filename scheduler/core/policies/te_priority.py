"""TE jobs ahead of BE jobs, without preemption."""

from __future__ import annotations

from scheduler.core.model import JobClass, PendingJob, Snapshot
from scheduler.core.policies.base import QueuePolicy


class TePriority(QueuePolicy):
    """Two queues, each in arrival order and non-blocking: every TE job is
    considered before any BE job, but running jobs are never preempted, so a
    TE job still waits for GPUs to free up. Isolates what queue priority alone
    buys; the BE queue follows the shared discipline."""

    name = "te-priority"
    te_first = True

    def te_queue(self, snapshot: Snapshot) -> list[PendingJob]:
        if snapshot.pending_te is not None:
            return snapshot.pending_te
        te = JobClass.TE
        return [p for p in snapshot.pending if p.spec.job_class is te]
