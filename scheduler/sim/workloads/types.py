"""What the simulator replays: jobs with their true run time, and a label.

A workload is plain data so that every source (synthetic generator, canonical
trace, Philly adapter) hands the simulator the same thing and the portal can
validate an uploaded trace with the very same loader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from scheduler.core.model import JobClass, JobSpec


class JobSpeed(Protocol):
    """How fast a job really runs on an allocation (the simulator's truth).

    ``reference`` is the seconds per iteration on the requested allocation,
    and ``duration = spec.steps * reference``; ``iter_time`` answers for any
    plan, placement (GPUs per node) and CPU threads, with whether the answer
    was measured (False: the performance model), or None when the plan cannot
    run there.
    """

    reference: float

    def iter_time(self, plan: str, placement: tuple[int, ...], cpus: float | None) -> tuple[float, bool] | None: ...


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job of a workload: the spec a scheduler sees, plus its true run time.

    ``duration`` is the run time on the requested resources without any
    interruption; policies never see it (``JobSpec`` has no such field).
    ``speed`` (reconfigurable jobs only) makes progress depend on the plan and
    allocation the job runs with; None: the job progresses one second of work
    per second whatever it runs on.
    """

    spec: JobSpec
    duration: float
    speed: JobSpeed | None = None


@dataclass(frozen=True)
class Workload:
    """A list of jobs in arrival order ``(submit_time, job id)``.

    ``name`` is a one-line description (source and parameters) that goes into
    every result; ``notes`` are further lines printed with every result (for
    example how a trace without job classes was split into TE and BE).
    """

    name: str
    jobs: list[SimJob]
    notes: tuple[str, ...] = field(default=())

    @property
    def max_gpus(self) -> int:
        """GPUs requested by the largest job (0 for an empty workload)."""
        return max((j.spec.num_gpus for j in self.jobs), default=0)

    @property
    def te_share(self) -> float:
        """Fraction of jobs that are TE (0 for an empty workload)."""
        if not self.jobs:
            return 0.0
        te = sum(1 for j in self.jobs if j.spec.job_class is JobClass.TE)
        return te / len(self.jobs)


def sort_jobs(jobs: list[SimJob]) -> list[SimJob]:
    """Jobs in the arrival order the snapshot contract requires."""
    return sorted(jobs, key=lambda j: (j.spec.submit_time, j.spec.id))
