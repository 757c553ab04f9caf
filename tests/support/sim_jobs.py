"""Small ``SimJob`` builders for simulator tests."""

from __future__ import annotations

from scheduler.core.model import JobClass, JobSpec
from scheduler.sim.workloads.types import SimJob


def job(
    job_id: str,
    submit: float,
    duration: float,
    gpus: int = 1,
    klass: JobClass = JobClass.BE,
    grace: float = 0.0,
) -> SimJob:
    """A job of ``duration`` seconds of work submitted at ``submit``."""
    return SimJob(JobSpec(id=job_id, job_class=klass, num_gpus=gpus, submit_time=submit, grace_period=grace), duration)
