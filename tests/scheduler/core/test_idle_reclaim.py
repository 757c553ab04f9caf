"""Idle reclaim's decisions: warn an idle TE job while others wait, reclaim it after the grace; nobody else."""

from __future__ import annotations

from scheduler.core.idle_reclaim import IdleReclaim, IdleWarn, decide, others_wait
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot


def running(job_id: str, job_class: JobClass = JobClass.TE, **fields) -> RunningJob:  # noqa: ANN003
    return RunningJob(spec=JobSpec(id=job_id, job_class=job_class, num_gpus=1, submit_time=0.0),
                      placement=Placement.of({"n1": 1}), attempt_start=0.0, first_start=0.0, **fields)


def waiting(**fields) -> PendingJob:  # noqa: ANN003
    return PendingJob(spec=JobSpec(id="w", job_class=JobClass.BE, num_gpus=2, submit_time=0.0), **fields)


def snap(jobs: list[RunningJob], pending: list[PendingJob] | None = None, after: float = 60.0) -> Snapshot:
    return Snapshot(nodes=[NodeCapacity("n1", 8)], running=jobs, pending=[waiting()] if pending is None else pending,
                    idle_after=after, idle_grace=30.0)


def test_an_idle_te_job_is_warned_then_reclaimed_after_the_grace() -> None:
    fresh = running("1", idle_since=100.0)
    assert decide(snap([fresh]), 159.0) == []
    (warn,) = decide(snap([fresh]), 160.0)
    assert isinstance(warn, IdleWarn) and warn.job_id == "1"
    assert "IDLE_RECLAIMED" in warn.message and "will not restart" in warn.message
    warned = running("1", idle_since=100.0, idle_warned_at=160.0)
    assert decide(snap([warned]), 189.0) == []
    (end,) = decide(snap([warned]), 190.0)
    assert isinstance(end, IdleReclaim) and end.job_id == "1"


def test_busy_be_stopping_jobs_and_an_empty_queue_are_left_alone() -> None:
    jobs = [running("busy"), running("be", JobClass.BE, idle_since=0.0), running("stop", idle_since=0.0, preempting=True)]
    assert decide(snap(jobs), 1e6) == []
    idle = [running("1", idle_since=0.0)]
    assert decide(snap(idle, pending=[]), 1e6) == []  # nobody waits
    assert decide(snap(idle, pending=[waiting(hold_reason="QuotaExceeded")]), 1e6) == []  # the waiter may not start
    assert decide(snap(idle, after=0.0), 1e6) == []  # reclaim off
    assert others_wait(snap(idle)) is True
