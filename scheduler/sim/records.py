"""What a simulation run is configured with and what it records: the
configuration, the error a policy bug raises, one record per attempt and per
preemption, and the run's result, from which every metric is derived."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.core.fairshare import DEFAULT_HALF_LIFE
from scheduler.core.metrics import JobOutcome
from scheduler.core.model import JobClass, Placement


class SimulationError(RuntimeError):
    """A policy returned an infeasible or inconsistent decision, or stalled."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Simulator parameters.

    ``resume_overhead``: seconds a job spends restoring its checkpoint when it
    restarts after a preemption. ``record_attempts``: keep a log of every
    attempt (for tests and analysis; costs memory linear in attempts).
    """

    resume_overhead: float = 60.0
    record_attempts: bool = False
    reconfigure_overhead: float = 60.0
    """Seconds a reconfigured job spends relaunching (no progress) after its checkpoint."""
    shares: Mapping[str, float] | None = None
    """Fair share on: configured share per tenant (tenants not listed get
    the default share); the simulator keeps each tenant's decayed usage on
    its clock and passes it to the policy as ``Snapshot.tenants``. None: off."""
    half_life: float = DEFAULT_HALF_LIFE
    """Seconds after which fair-share usage counts half."""
    round_seconds: float | None = None
    """Scheduling rounds: the policy decides every ``round_seconds`` (from
    ``round_seconds`` on) and at no other time, as the Pollux study's
    scheduler does; None: at every arrival and completion."""

    def __post_init__(self) -> None:
        if not self.resume_overhead >= 0:
            raise ValueError(f"resume_overhead must be >= 0, got {self.resume_overhead}")
        if not self.reconfigure_overhead >= 0:
            raise ValueError(f"reconfigure_overhead must be >= 0, got {self.reconfigure_overhead}")
        if self.round_seconds is not None and not self.round_seconds > 0:
            raise ValueError(f"round_seconds must be > 0, got {self.round_seconds}")


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One run of a job: ``end`` is completion or vacate; ``notice`` the
    preemption notice (None for an attempt that completed)."""

    job_id: str
    job_class: JobClass
    placement: Placement
    start: float
    end: float
    notice: float | None
    preempted_for: str | None


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """A preemption notice: when, whom, for whom, how long the attempt had run
    and how much work the job had done (all attempts) at the notice."""

    time: float
    job_id: str
    job_class: JobClass
    for_job: str | None
    attempt_runtime: float
    progress: float
    count: int  # the job's preemptions including this one


@dataclass
class SimResult:
    """Everything a run produced; metrics are derived from it."""

    outcomes: list[JobOutcome]
    total_gpus: int
    allocated_gpu_seconds: float
    lost_gpu_seconds: float
    preemptions: list[PreemptionRecord]
    decide_calls: int
    # Allocated GPUs as a step function: util_gpus[i] from util_times[i] on.
    util_times: array = field(default_factory=lambda: array("d"))
    util_gpus: array = field(default_factory=lambda: array("l"))
    attempts: list[AttemptRecord] | None = None
    # Reconfigurable jobs: Reconfigure decisions applied, and how often (and
    # for how many seconds of attempts) an iteration time came from the
    # performance model because that plan and placement were not measured.
    reconfigurations: int = 0
    timed_attempts: int = 0
    modelled_attempts: int = 0
    timed_seconds: float = 0.0
    modelled_seconds: float = 0.0
    below_request: frozenset[str] = frozenset()
    """Reconfigurable jobs that ran some attempt slower than requested."""


__all__ = ["AttemptRecord", "PreemptionRecord", "SimConfig", "SimResult", "SimulationError"]
