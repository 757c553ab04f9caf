"""The one BE job per cycle that gets a reservation, and what it blocks.

``StarvationGuard`` holds it: the oldest eligible job past the starvation
threshold, or, with fair share on, the head of the fair order when it keeps
its tenant within its entitlement or brings it closer to it
(``scheduler.core.fair_queue``, ``FairView.head_due``). Its
reservation (``scheduler.core.reservation``) is computed at most once per
cycle, and only when asked: while the job fits, or while nothing else could
start anyway, it is not needed.
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
    """The job the cycle reserves nodes for (module doc). ``why``: None for a
    job past the starvation threshold, else the reason in words (fair share)."""

    __slots__ = ("cyc", "job", "why", "_done", "_reservation")

    def __init__(self, cyc: _Cycle, job: PendingJob, why: str | None = None) -> None:
        self.cyc = cyc
        self.job = job
        self.why = why
        self._done = False
        self._reservation: Reservation | None = None

    def reservation(self) -> Reservation | None:
        """The reservation, or None if the job fits now or never can."""
        if not self._done:
            self._done = True
            cyc = self.cyc
            if cyc.cap.place(self.job.spec) is None:
                self._reservation = reserve(self.job, cyc.snapshot.nodes, cyc.cap, cyc.snapshot.running, cyc.now)
        return self._reservation

    def avoid(self) -> frozenset[str]:
        r = self.reservation()
        return r.nodes if r is not None else NO_NODES
