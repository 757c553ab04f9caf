"""Job dependencies in the simulator: a job waits, held, until the jobs it names have ended.

The simulator's jobs always complete (none fails, none is cancelled), so an
``afterok`` or ``afterany`` dependency is satisfied once every job it names
has completed, and an ``afternotok`` one never would be: a workload that asks
for one is refused up front, as are dependencies on unknown jobs and cycles,
each with a message naming the job.

A held job is pending with ``hold_reason = Dependency`` (the snapshot marks
it not yet eligible, as the live loop's does), so every policy leaves it
waiting; its wait counts from its submission, as the live cluster counts it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from scheduler.core.decisions import Reason
from scheduler.core.dependencies import DependencyKind, Outcome, Status, find_cycle, job_ids, status, waiting_message
from scheduler.sim.job_state import SimJobState


class DependencyTracker:
    """Which pending jobs still wait on others; ``hold`` on arrival, ``completed`` on each completion."""

    def __init__(self, jobs: Sequence[SimJobState]) -> None:
        """Raises ``ValueError`` naming the job for an unknown job id, ``afternotok`` or a cycle."""
        self._outcomes: dict[str, Outcome] = {j.spec.id: Outcome.WAITING for j in jobs}
        self._dependents: dict[str, list[SimJobState]] = defaultdict(list)
        edges: dict[str, set[str]] = {}
        for job in jobs:
            clauses = job.spec.dependencies
            if not clauses:
                continue
            if any(c.kind is DependencyKind.AFTERNOTOK for c in clauses):
                raise ValueError(f"job {job.spec.id!r}: afternotok never holds in the simulator (its jobs never fail)")
            named = job_ids(clauses)
            unknown = sorted(named - self._outcomes.keys())
            if unknown:
                raise ValueError(f"job {job.spec.id!r} depends on unknown job {unknown[0]!r}")
            edges[job.spec.id] = named
            for other in named:
                self._dependents[other].append(job)
        cycle = find_cycle(edges)
        if cycle:
            raise ValueError(f"dependency cycle: {' -> '.join(cycle)}")

    def hold(self, job: SimJobState) -> None:
        """Hold the job's new PendingJob while its dependencies are not satisfied."""
        clauses = job.spec.dependencies
        if clauses and job.pending is not None and status(clauses, self._outcomes) is Status.WAITING:
            job.pending.hold_reason = Reason.DEPENDENCY.value
            job.pending.hold_message = waiting_message(clauses, self._outcomes)

    def completed(self, job_id: str) -> None:
        """``job_id`` completed: release the pending jobs this satisfies, update the others' message."""
        self._outcomes[job_id] = Outcome.OK
        for job in self._dependents.pop(job_id, ()):
            pending = job.pending
            if pending is None or pending.hold_reason != Reason.DEPENDENCY.value:
                continue  # not arrived yet: ``hold`` decides when it arrives
            if status(job.spec.dependencies, self._outcomes) is Status.SATISFIED:
                pending.hold_reason, pending.hold_message = None, ""
            else:
                pending.hold_message = waiting_message(job.spec.dependencies, self._outcomes)
