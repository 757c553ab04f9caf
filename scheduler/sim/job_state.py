"""The simulator's state of each job, and the pending queue's order.

A job is FUTURE until it arrives, then PENDING, RUNNING, PREEMPTING (holding
its resources through its grace period after a notice), RESHAPING (a
reconfiguration checkpointing on its current resources) and finally DONE.
While it runs, its ``LiveRunningJob`` in the snapshot derives ``progress``
from the virtual clock, so no event has to touch every running job.
"""

from __future__ import annotations

from bisect import bisect_left

from scheduler.core.decisions import Reconfigure
from scheduler.core.model import PendingJob, RunningJob
from scheduler.sim.workloads.types import SimJob

# Job states.
FUTURE, PENDING, RUNNING, PREEMPTING, DONE, RESHAPING = range(6)
# Event kinds (their order breaks ties between events at one timestamp; any
# order would do since decide() runs only after the whole batch).
COMPLETE, VACATE, RESHAPE, WAKE = 0, 1, 2, 3


class VirtualClock:
    """The simulator's clock: ``now`` is the time of the events being applied."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class LiveRunningJob(RunningJob):
    """A ``RunningJob`` whose ``progress`` is derived from the virtual clock.

    Work accrues from ``_work_from`` (attempt start plus any resume overhead)
    until the preemption notice, on top of ``_base`` (progress at attempt start).
    """

    __slots__ = ("_base", "_work_from", "_clock", "_index", "_rate", "_ref")

    @property
    def progress(self) -> float:  # type: ignore[override]
        t = self._clock.now if self.notice_time is None else self.notice_time
        done = t - self._work_from
        return self._base + done * self._rate if done > 0 else self._base

    @progress.setter
    def progress(self, value: float) -> None:
        self._base = value

    @property
    def steps_done(self) -> float:  # type: ignore[override]
        """Iterations done: work over the reference iteration time."""
        return self.progress / self._ref if self._ref else 0.0

    @steps_done.setter
    def steps_done(self, value: float) -> None:
        pass  # derived from progress


class SimJobState:
    """The simulator's private state of one job."""

    __slots__ = (
        "spec", "duration", "state", "attempt", "progress", "preemptions",
        "first_start", "completion", "pending", "running", "overhead", "speed", "modelled", "reshape",
        "reconfigurations", "last_reconfigure",
    )

    def __init__(self, sim_job: SimJob) -> None:
        self.spec = sim_job.spec
        self.duration = sim_job.duration
        self.speed = sim_job.speed
        self.modelled = False  # the current attempt's iteration time came from the model
        self.reshape: Reconfigure | None = None
        # Kept across attempts, so a restart after a preemption does not
        # reset a policy's minimum interval between reconfigurations.
        self.reconfigurations = 0
        self.last_reconfigure: float | None = None
        self.state = FUTURE
        self.attempt = 0
        self.progress = 0.0
        self.preemptions = 0
        self.first_start: float | None = None
        self.completion: float | None = None
        self.pending: PendingJob | None = None
        self.running: LiveRunningJob | None = None
        self.overhead = 0.0


def pending_key(p: PendingJob) -> tuple[float, str]:
    """The pending queue's order: arrival time, then job id."""
    return (p.spec.submit_time, p.spec.id)


def insert_pending(queue: list[PendingJob], p: PendingJob) -> None:
    """Insert keeping arrival order; arrivals (the common case) append."""
    if queue and pending_key(queue[-1]) > pending_key(p):
        queue.insert(bisect_left(queue, pending_key(p), key=pending_key), p)
    else:
        queue.append(p)


def remove_pending(queue: list[PendingJob], gone: list[PendingJob]) -> None:
    """Remove these entries: by binary search when few, else in one pass."""
    if len(gone) > 8:
        ids = {id(p) for p in gone}
        queue[:] = [p for p in queue if id(p) not in ids]
    else:
        for p in gone:
            del queue[bisect_left(queue, pending_key(p), key=pending_key)]


__all__ = [
    "COMPLETE", "DONE", "FUTURE", "LiveRunningJob", "PENDING", "PREEMPTING", "RESHAPE", "RESHAPING", "RUNNING",
    "SimJobState", "VACATE", "VirtualClock", "WAKE", "insert_pending", "pending_key", "remove_pending",
]
