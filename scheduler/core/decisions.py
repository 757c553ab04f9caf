"""The closed set of decisions a policy may return.

Every decision carries a reason code (machine-readable, Slurm-like) and a
message a person can read on the dashboard ("why is my job pending").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from scheduler.core.model import Placement
from scheduler.core.quick_init import quick_init


class Reason(str, Enum):
    """Reason codes, shared by decisions and pending jobs."""

    # Why a job starts or is preempted.
    SCHEDULED = "Scheduled"
    PREEMPTED_FOR_TE = "PreemptedForTE"
    # Why a job stays pending (Slurm's names where Slurm has one).
    RESOURCES = "Resources"
    PRIORITY = "Priority"
    QUOTA_EXCEEDED = "QuotaExceeded"
    WAITING_FOR_PREEMPTION = "WaitingForPreemption"
    RESERVED = "Reservation"
    RECONFIGURED = "Reconfigured"
    IMAGE_UNAVAILABLE = "ImageUnavailable"  # held: the job's image is unavailable on every node it may use
    JOB_ARRAY_TASK_LIMIT = "JobArrayTaskLimit"  # held: its array already runs its %N tasks at once
    DEPENDENCY = "Dependency"  # held: jobs it depends on have not ended yet (scheduler.core.dependencies)
    JOB_HELD_USER = "JobHeldUser"  # held by its owner until released (scheduler.holds)
    JOB_HELD_ADMIN = "JobHeldAdmin"  # held by an administrator; only staff release it
    # Why a running job is preempted or reconfigured (reconfiguration-aware policies).
    PREEMPTED_FOR_PRIORITY = "PreemptedForPriority"
    SHRUNK_FOR_JOB = "ShrunkForJob"
    GROWN = "Grown"
    PLAN_CHANGED = "PlanChanged"


@quick_init
@dataclass(frozen=True, slots=True)
class Start:
    """Start a pending job on ``placement``."""

    job_id: str
    placement: Placement
    reason: Reason = Reason.SCHEDULED
    message: str = ""
    plan: str = ""
    """Execution plan to run with (empty: the job's own ``spec.plan``)."""
    cpus: float | None = None
    """CPU threads for the whole job (None: the request, in proportion to the
    GPUs placed). A reconfigurable job may get a GPU count other than its
    request, within ``spec.gpu_range``."""


@quick_init
@dataclass(frozen=True, slots=True)
class Reconfigure:
    """Change a running job's allocation and/or plan.

    The job checkpoints (its grace period, holding its current resources when
    the new placement only gives some up) and relaunches on ``placement`` with
    ``plan`` and ``cpus`` (None: in proportion to the GPUs), paying the restart
    time before it progresses again. ``for_job`` names the job a shrink makes
    room for, if any.
    """

    job_id: str
    placement: Placement
    plan: str
    cpus: float | None = None
    for_job: str | None = None
    reason: Reason = Reason.RECONFIGURED
    message: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class Preempt:
    """Send a preemption notice to a running job (it keeps its resources until
    it vacates, at most its grace period later)."""

    job_id: str
    for_job: str | None
    reason: Reason = Reason.PREEMPTED_FOR_TE
    message: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class Pend:
    """Keep a pending job waiting, with the reason shown to its owner."""

    job_id: str
    reason: Reason
    message: str = ""
    expected_at: float | None = None
    """When the wait is expected to end, on the policy's clock (None: not known): a TE job
    waiting for its victims gets the end of their grace periods. It stays out of ``message``,
    whose text thus stays the same from cycle to cycle while the job waits; where the message
    is shown, the time is written beside it (``scheduler.pending_reasons``)."""


Decision = Start | Preempt | Pend | Reconfigure
