"""The BE jobs a cycle reserves nodes for, and what they block.

``StarvationGuard`` holds them, in the order the BE pass reaches them: the
oldest eligible job past the starvation threshold or, with fair share on,
the head of each tenant's queue that keeps its tenant within its
entitlement or brings it closer to it (``scheduler.core.fair_queue``,
``FairView.heads_due``): one reservation per tenant below its part, so that
borrowers' small jobs cannot refill the nodes any of them drains. Each
reservation (``scheduler.core.reservation``) is computed at most once per
cycle, only when asked (while the job fits, or while nothing else could
start anyway, it is not needed), and never on nodes already reserved for a
job before it.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from scheduler.core.model import NodeCapacity, PendingJob, RunningJob
from scheduler.core.placement import FreeCapacity
from scheduler.core.reservation import Reservation, reserve

NO_NODES: frozenset[str] = frozenset()


class _Snapshot(Protocol):
    nodes: Sequence[NodeCapacity]
    running: Sequence[RunningJob]


class _Cycle(Protocol):
    """What the guard reads of a policy's per-call state (``base.Cycle``)."""

    cap: FreeCapacity
    snapshot: _Snapshot
    now: float


def free_outside(cap: FreeCapacity, blocked: frozenset[str]) -> int:
    """Free GPUs on the nodes not in ``blocked``."""
    gpus = cap.gpus
    return cap.total_gpus - sum(g for n in blocked if (g := gpus[n]) > 0)


class StarvationGuard:
    """The jobs the cycle reserves nodes for (module doc), first one given to
    the constructor, more with ``add``. A job's ``why``: None for a job past
    the starvation threshold, else the reason in words (fair share)."""

    __slots__ = ("cyc", "jobs", "ids", "_why", "_done", "_taken", "_reservations")

    def __init__(self, cyc: _Cycle, job: PendingJob, why: str | None = None) -> None:
        self.cyc = cyc
        self.jobs: list[PendingJob] = []
        self.ids: dict[str, int] = {}  # job id -> its place in ``jobs``
        self._why: list[str | None] = []
        self._done = 0  # reservations are computed for ``jobs[:_done]``
        self._taken = NO_NODES  # their nodes
        self._reservations: dict[str, Reservation] = {}
        self.add(job, why)

    def add(self, job: PendingJob, why: str | None = None) -> None:
        """Guard one more job, reached after those guarded already."""
        self.ids[job.spec.id] = len(self.jobs)
        self.jobs.append(job)
        self._why.append(why)

    def why_of(self, job_id: str) -> str | None:
        return self._why[self.ids[job_id]]

    def reservation(self, job_id: str | None = None) -> Reservation | None:
        """The reservation of the job (default: the first), or None if it fits
        now outside the nodes reserved before it, or never can. Computes those
        of the jobs before it first, so each keeps off their nodes."""
        last = 0 if job_id is None else self.ids[job_id]
        while self._done <= last:
            job = self.jobs[self._done]
            self._done += 1
            r = self._reserve(job)
            if r is not None:
                self._reservations[job.spec.id] = r
                self._taken = self._taken | r.nodes
        return self._reservations.get(self.jobs[last].spec.id)

    def _reserve(self, job: PendingJob) -> Reservation | None:
        cyc, taken = self.cyc, self._taken
        if cyc.cap.place(job.spec, taken) is not None:
            return None
        nodes = cyc.snapshot.nodes
        if taken:
            nodes = [n for n in nodes if n.name not in taken]
        return reserve(job, nodes, cyc.cap, cyc.snapshot.running, cyc.now)

    def avoid(self) -> frozenset[str]:
        """Nodes of every guarded job's reservation (computing them all)."""
        self.reservation(self.jobs[-1].spec.id)
        return self._taken
