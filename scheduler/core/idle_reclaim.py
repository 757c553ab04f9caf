"""Idle reclaim, the pure part: which idle TE jobs to warn and which to end (no clock, no database).

A TE job is idle when its GPUs have stayed below the site's utilisation
threshold since ``RunningJob.idle_since`` (measured from telemetry by whoever
builds the snapshot; the simulator can set it too). While other jobs wait for
GPUs, a TE job idle for ``Snapshot.idle_after`` seconds is warned
(``IdleWarn``), and one still idle ``Snapshot.idle_grace`` seconds after its
warning is ended (``IdleReclaim``). A job that becomes busy again loses its
idle time and its warning (the snapshot then carries neither). TE jobs are not
resumable by contract, so the reclaim ends the job, and the warning says so.
BE jobs are preemptible anyway and are never reclaimed here; nor is a job
already stopping, and nothing is reclaimed while nobody waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model import JobClass, RunningJob, Snapshot

#: The JobEvent reasons of the warning and of the end.
WARNING_REASON = "IdleWarning"
RECLAIMED_REASON = "IDLE_RECLAIMED"


@dataclass(frozen=True, slots=True)
class IdleWarn:
    job_id: str
    message: str


@dataclass(frozen=True, slots=True)
class IdleReclaim:
    job_id: str
    message: str


def others_wait(snapshot: Snapshot) -> bool:
    """Some pending job that wants GPUs could start but for capacity (not held by a quota or an image)."""
    return any(p.spec.num_gpus > 0 and p.hold_reason is None for p in snapshot.pending)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def warning_text(job: RunningJob, now: float, grace: float) -> str:
    idle = now - (job.idle_since or now)
    return (f"idle: its GPUs have been below the idle threshold for {_minutes(idle)} while other jobs wait; "
            f"unless they are busy again within {_minutes(grace)} the job is ended (IDLE_RECLAIMED). "
            "TE jobs are not resumed: it will not restart.")


def decide(snapshot: Snapshot, now: float) -> list[IdleWarn | IdleReclaim]:
    """The warnings and reclaims due at ``now`` (module docstring); [] when idle reclaim is off."""
    if snapshot.idle_after <= 0 or not others_wait(snapshot):
        return []
    out: list[IdleWarn | IdleReclaim] = []
    for job in snapshot.running:
        if job.spec.job_class is not JobClass.TE or job.preempting or job.reconfiguring or job.idle_since is None:
            continue
        if now - job.idle_since < snapshot.idle_after:
            continue
        if job.idle_warned_at is None:
            out.append(IdleWarn(job.spec.id, warning_text(job, now, snapshot.idle_grace)))
        elif now - job.idle_warned_at >= snapshot.idle_grace:
            out.append(IdleReclaim(job.spec.id, f"idle for {_minutes(now - job.idle_since)}, warned "
                                                f"{_minutes(now - job.idle_warned_at)} ago; ended to free its GPUs"))
    return out
