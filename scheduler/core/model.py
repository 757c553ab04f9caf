"""Plain data the scheduling policies read: the cluster snapshot.

Everything here is pure Python (no Django, Celery, I/O, wall clock or global
random state) so the live loop and the simulator build the very same objects
and call the very same policies.

Times are seconds as floats on whatever clock the caller uses (virtual in the
simulator, epoch seconds in the live loop); policies only compare and subtract
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class JobClass(str, Enum):
    """Trial-and-error (interactive, latency-sensitive) or best-effort."""

    TE = "TE"
    BE = "BE"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What the scheduler knows about a job when it is submitted.

    The true run time is deliberately absent: a live scheduler does not know it,
    so no policy may depend on it. ``time_limit`` is the user's declared limit
    (None: none declared).
    """

    id: str
    job_class: JobClass
    num_gpus: int
    submit_time: float
    num_cpus: float = 0.0
    mem_gb: float = 0.0
    grace_period: float = 0.0
    priority: int = 0
    user: str = ""
    tenant: str = ""
    time_limit: float | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A schedulable machine and its capacity."""

    name: str
    gpus: int
    cpus: float = 0.0
    mem_gb: float = 0.0


@dataclass(frozen=True, slots=True)
class Placement:
    """GPUs taken on each node, as ``((node_name, gpus), ...)`` sorted by node.

    A job is placed all or nothing: a placement always holds exactly the job's
    GPU count. CPU and memory are charged per node in proportion to GPUs.
    """

    parts: tuple[tuple[str, int], ...]

    @property
    def num_gpus(self) -> int:
        return sum(g for _, g in self.parts)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.parts)

    @staticmethod
    def of(mapping: dict[str, int]) -> "Placement":
        return Placement(tuple(sorted((n, g) for n, g in mapping.items() if g > 0)))


@dataclass(slots=True)
class RunningJob:
    """A job holding resources: running, or vacating after a preemption notice.

    ``progress`` is seconds of useful work done at ``now`` across all attempts;
    ``attempt_start`` is when the current attempt started; ``first_start`` when
    the job first started. ``preempting`` is True from the preemption notice
    until the job has vacated (its resources stay held meanwhile) and
    ``preempted_for`` then names the job the resources are being freed for.
    """

    spec: JobSpec
    placement: Placement
    attempt_start: float
    first_start: float
    progress: float = 0.0
    preemptions: int = 0
    preempting: bool = False
    preempted_for: str | None = None
    notice_time: float | None = None


@dataclass(slots=True)
class PendingJob:
    """A job waiting for resources.

    ``hold_reason`` is set by whoever builds the snapshot when the job may not
    start whatever the policy thinks (for example ``QuotaExceeded``); the policy
    then leaves it pending with that reason.
    """

    spec: JobSpec
    progress: float = 0.0
    preemptions: int = 0
    first_start: float | None = None
    hold_reason: str | None = None
    hold_message: str = ""


@dataclass(slots=True)
class Snapshot:
    """The cluster as one scheduling cycle sees it.

    ``pending`` is in submission order (submit time, then job id). Collections
    are read-only to policies: a policy returns decisions and never mutates the
    snapshot.
    """

    nodes: list[Node]
    running: list[RunningJob] = field(default_factory=list)
    pending: list[PendingJob] = field(default_factory=list)
    free: dict[str, tuple[int, float, float]] | None = None
    """Optional: per node name, the ``(gpus, cpus, mem_gb)`` not held by any
    running or preempting job, with ``math.inf`` for a CPU or memory capacity
    the node does not track (0). A caller that tracks allocations incrementally
    (the simulator, with ``scheduler.core.placement.FreeLedger``) passes it to
    spare every policy an O(running) pass per cycle; it must agree with
    ``running``. None: policies derive it from ``running``."""
    pending_te: list[PendingJob] | None = None
    """Optional: the TE jobs of ``pending``, the same objects in the same
    order, for a caller that keeps its queue incrementally, so that policies
    find the TE queue without a pass over every pending job. None: policies
    filter ``pending``."""
