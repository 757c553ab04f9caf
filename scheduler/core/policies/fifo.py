"""First in, first out: one queue of all pending jobs, TE and BE alike."""

from __future__ import annotations

from scheduler.core.decisions import Decision, Reason
from scheduler.core.model import Snapshot
from scheduler.core.policies.base import Cycle, QueuePolicy
from scheduler.core.queue_order import queues


class Fifo(QueuePolicy):
    """One queue in arrival order, non-blocking (what a Kubernetes-style
    scheduler does): a job that does not fit lets the jobs behind it start.
    The baseline the paper compares against. Job class is ignored, so the
    anti-starvation reservation goes to the oldest job of either class."""

    name = "fifo"


class FifoStrict(QueuePolicy):
    """Textbook FIFO: the first job that does not fit blocks every job behind
    it (they get ``Priority``); "first" is the highest priority, then the
    earliest arrival. Held jobs (e.g. over quota) and jobs larger
    than the whole cluster do not block, or the queue would stop for good.
    No anti-starvation rule: strict order already prevents starvation. With
    fair share on, the queue is in fair order; no reclaim (nothing is
    preempted by a strict queue)."""

    name = "fifo-strict"

    def __init__(self, *, explain: bool = True) -> None:
        super().__init__(starvation_threshold=None, explain=explain)

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        cyc = Cycle(snapshot, now, self.explain)
        explain = cyc.explain
        head = None
        queue = queues(snapshot, ())[1]
        for job in queue:
            if job.hold_reason is not None:
                if explain:
                    cyc.pend_hold(job)
                continue
            if head is not None:
                if not explain:
                    break
                cyc.pend(job, Reason.PRIORITY, f"behind job {head} at the head of the queue (strict first in, first out)")
                continue
            placement = cyc.cap.place(job.spec)
            if placement is not None:
                cyc.start(job, placement)
                continue
            if cyc.can_ever_fit(job):
                head = job.spec.id
            if explain:
                cyc.pend(job, Reason.RESOURCES, cyc.resources_message(job))
        return cyc.out
