"""Builders for small hand-made snapshots."""

from __future__ import annotations

from scheduler.core.decisions import Pend, Preempt, Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot

TE, BE = JobClass.TE, JobClass.BE


def nodes(*specs: tuple[str, int] | tuple[str, int, float, float]) -> list[NodeCapacity]:
    return [NodeCapacity(*s) for s in specs]


def uniform(n: int, gpus: int = 8) -> list[NodeCapacity]:
    return [NodeCapacity(f"n{i}", gpus) for i in range(1, n + 1)]


def pend(jid: str, gpus: int = 1, cls: JobClass = BE, submit: float = 0.0, **kw) -> PendingJob:
    extra = {k: kw.pop(k) for k in ("progress", "preemptions", "first_start", "hold_reason", "hold_message") if k in kw}
    return PendingJob(JobSpec(jid, cls, gpus, submit, **kw), **extra)


def run(
    jid: str,
    where: dict[str, int] | str,
    cls: JobClass = BE,
    start: float = 0.0,
    grace: float = 0.0,
    preemptions: int = 0,
    progress: float = 0.0,
    preempting: bool = False,
    preempted_for: str | None = None,
    notice: float | None = None,
    **kw,
) -> RunningJob:
    if isinstance(where, str):
        where = {where: kw.pop("gpus", 1)}
    placement = Placement.of(where)
    spec = JobSpec(jid, cls, placement.num_gpus, kw.pop("submit", 0.0), grace_period=grace, **kw)
    return RunningJob(
        spec,
        placement,
        attempt_start=start,
        first_start=start,
        progress=progress,
        preemptions=preemptions,
        preempting=preempting,
        preempted_for=preempted_for,
        notice_time=notice,
    )


def snap(node_list, running=(), pending=(), free=None) -> Snapshot:
    return Snapshot(list(node_list), list(running), list(pending), free)


def starts(decisions) -> dict[str, dict[str, int]]:
    return {d.job_id: dict(d.placement.parts) for d in decisions if isinstance(d, Start)}


def preempts(decisions) -> dict[str, str | None]:
    return {d.job_id: d.for_job for d in decisions if isinstance(d, Preempt)}


def pends(decisions) -> dict[str, str]:
    return {d.job_id: d.reason.value for d in decisions if isinstance(d, Pend)}


def by_job(decisions) -> dict[str, object]:
    return {d.job_id: d for d in decisions}


def short_grace_vs_newest():
    """a: two old 1-GPU jobs with a 30 s grace; b: a new 2-GPU job with a 600 s grace."""
    return snap(
        nodes(("a", 2), ("b", 2)),
        running=[
            run("x1", {"a": 1}, start=0, grace=30),
            run("x2", {"a": 1}, start=10, grace=30),
            run("y", {"b": 2}, start=50, grace=600),
        ],
        pending=[pend("t", 1, TE, submit=60)],
    )
