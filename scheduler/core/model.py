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
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from scheduler.core.quick_init import quick_init

if TYPE_CHECKING:
    from scheduler.core.adaptive import AdaptiveModel
    from scheduler.core.dependencies import Dependency
    from scheduler.core.fairshare import TenantUsage


class JobClass(str, Enum):
    """Trial-and-error (interactive, latency-sensitive) or best-effort."""

    TE = "TE"
    BE = "BE"


class JobThroughput(Protocol):
    """A job's speed as a function of its allocation (implemented in
    ``scheduler.core.elastic``). Pure and memoized: cheap to call every cycle."""

    def best(self, placement: Sequence[int], cpus: float | None = None) -> "tuple[str, float] | None":
        """The fastest allowed plan on ``placement`` (GPUs per node) with
        ``cpus`` CPU threads in all, and its seconds per iteration; None when
        no allowed plan can run there."""
        ...

    def reference(self) -> float:
        """Seconds per iteration of the user's plan on the requested GPUs."""
        ...


@quick_init
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
    # Reconfigurable training jobs (Rubick). All optional: the defaults describe
    # a job that runs as requested, and every policy that ignores these fields
    # keeps working. See docs/rubick.md.
    model: str = ""
    """Model name (e.g. ``bert``); empty for a job the scheduler knows nothing about."""
    plan: str = ""
    """The user's execution plan (``ga``, ``zero-dp``, ``"244"``, ...); empty: none declared."""
    allowed_plans: tuple[str, ...] = ()
    """Plans the scheduler may switch the job to; empty: only ``plan``."""
    min_gpus: int = 0
    """Fewest GPUs the job may run on; 0: exactly ``num_gpus``."""
    max_gpus: int = 0
    """Most GPUs the job may run on; 0: exactly ``num_gpus``."""
    guaranteed: bool = False
    """A guaranteed job must get at least the throughput of its requested
    allocation (``plan`` on ``num_gpus``); False: best-effort."""
    steps: int = 0
    """Iterations to complete (declared by the user); 0: not declared."""
    throughput: "JobThroughput | None" = field(default=None, compare=False, repr=False)
    """Seconds per iteration as a function of the allocation (best plan per
    allocation); None: unknown, the job is not reconfigured."""
    adaptive: "AdaptiveModel | None" = field(default=None, compare=False, repr=False)
    """An adaptive job (``scheduler.core.adaptive``): its speed depends on its
    GPUs and batch size, and it completes at a target progress; None: not one."""
    excluded_nodes: frozenset[str] = frozenset()
    """Nodes the job must not be placed on (the live cluster: its image was
    unavailable there); placement (``FreeCapacity.place``) never uses them."""
    dependencies: "tuple[Dependency, ...]" = ()
    """Jobs this one waits for (``scheduler.core.dependencies``); whoever builds
    the snapshot holds the job with ``hold_reason = Dependency`` until they
    are satisfied, so policies need not read this. Empty: none."""
    array_id: str = ""
    """The job array this job is a task of (its first task's id); empty: none."""
    array_limit: int = 0
    """At most this many of the array's tasks hold GPUs at once (Slurm's ``%N``); whoever builds
    the snapshot holds the tasks past it with ``hold_reason = JobArrayTaskLimit``. 0: no limit."""

    @property
    def reconfigurable(self) -> bool:
        """True when a policy may change the job's plan or GPU count."""
        return self.throughput is not None and (
            bool(self.allowed_plans) or self.gpu_range != (self.num_gpus, self.num_gpus)
        )

    @property
    def gpu_range(self) -> tuple[int, int]:
        """``(min, max)`` GPUs the job may run on."""
        return (self.min_gpus or self.num_gpus, self.max_gpus or self.num_gpus)


@quick_init
@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """A schedulable machine and its capacity."""

    name: str
    gpus: int
    cpus: float = 0.0
    mem_gb: float = 0.0


@quick_init
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
    # Reconfigurable jobs: for them ``spec`` carries the current allocation
    # (``num_gpus``, ``num_cpus``, ``mem_gb``), which may differ from the request.
    plan: str = ""
    """The execution plan the job runs with now (empty: not tracked)."""
    steps_done: float = 0.0
    """Iterations completed at ``now`` across all attempts."""
    reconfigurations: int = 0
    """How often the job has been reconfigured (Reconfigure decisions applied)."""
    last_reconfigure: float | None = None
    """When the latest Reconfigure of the job was decided (None: never)."""
    reconfiguring: bool = False
    """True from a Reconfigure notice until the job relaunches on its new
    allocation (it checkpoints meanwhile, holding its current one)."""
    reconfigured_for: str | None = None
    """The job a shrink is freeing resources for, while ``reconfiguring``."""
    idle_since: float | None = None
    """Since when the job's GPUs have stayed below the idle threshold (None: busy, or not measured)."""
    idle_warned_at: float | None = None
    """When the job was warned that it will be reclaimed for idleness (None: not warned in this idle spell)."""
    attained: float | None = None
    """Adaptive jobs: GPU-seconds held over all attempts, when the snapshot's builder counts them (the
    live cluster, from its attempts); None: an allocation policy keeps its own count."""
    most_gpus: int | None = None
    """Adaptive jobs: the most GPUs any attempt held, counted like ``attained``."""


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
    steps_done: float = 0.0
    """Iterations completed before the job was preempted (reconfigurable jobs)."""
    attained: float | None = None
    """As ``RunningJob.attained``: GPU-seconds held so far (None: not counted by the builder)."""
    most_gpus: int | None = None
    """As ``RunningJob.most_gpus``."""


@dataclass(slots=True)
class Snapshot:
    """The cluster as one scheduling cycle sees it.

    ``pending`` is in submission order (submit time, then job id); the queue
    policies consider a higher ``priority`` first within a class
    (``scheduler.core.queue_order``). Collections are read-only to policies: a
    policy returns decisions and never mutates the snapshot.
    """

    nodes: list[NodeCapacity]
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
    tenants: "Mapping[str, TenantUsage] | None" = None
    """Fair share: every tenant's configured share and decayed usage, kept by
    the caller (``scheduler.core.fairshare``); a job's tenant is
    ``spec.tenant``, one missing here has the default share and no usage.
    None: fair share off, tenants are ignored."""
    idle_after: float = 0.0
    """Idle reclaim (``scheduler.core.idle_reclaim``): seconds a TE job may stay idle while others wait
    before it is warned; 0: idle reclaim off."""
    idle_grace: float = 0.0
    """Seconds from the idle warning to the reclaim."""
    uniform_priority: bool | None = None
    """Optional: True when every pending job has the same ``priority`` (False
    when not), for a caller that keeps count, so that policies skip a pass
    over the queue to find out. None: policies check ``pending``."""
