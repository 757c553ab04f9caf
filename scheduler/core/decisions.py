"""The closed set of decisions a policy may return.

Every decision carries a reason code (machine-readable, Slurm-like) and a
message a person can read on the dashboard ("why is my job pending").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from scheduler.core.model import Placement


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


@dataclass(frozen=True, slots=True)
class Start:
    """Start a pending job on ``placement``."""

    job_id: str
    placement: Placement
    reason: Reason = Reason.SCHEDULED
    message: str = ""


@dataclass(frozen=True, slots=True)
class Preempt:
    """Send a preemption notice to a running job (it keeps its resources until
    it vacates, at most its grace period later)."""

    job_id: str
    for_job: str | None
    reason: Reason = Reason.PREEMPTED_FOR_TE
    message: str = ""


@dataclass(frozen=True, slots=True)
class Pend:
    """Keep a pending job waiting, with the reason shown to its owner."""

    job_id: str
    reason: Reason
    message: str = ""


Decision = Start | Preempt | Pend
