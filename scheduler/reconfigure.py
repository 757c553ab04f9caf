"""Reconfiguration on the live cluster: the apply step's writes for ``Reconfigure``
decisions and the plan an attempt starts with.

A reconfiguration goes through the checkpoint path (docs/live_cluster.md,
"Reconfiguration"):

1. ``apply_reconfigure`` (one decision, inside the cycle's savepoint):
   ``Job(id, state=RUNNING, attempt_count=n)`` -> PREEMPTING with the target
   plan, GPU count and placement recorded on the job and
   ``reconfiguration_count`` + 1 (``preemption_count`` is left alone); the
   attempt gets its notice (``notice_at``, ``notice_reason = reconfigure``,
   ``preempted_for`` = the job a shrink makes room for); one JobEvent with
   reason Reconfigured and the old -> new plan and GPUs; on commit every node
   of the attempt gets AGENT_PREEMPT (SIGTERM, the job's grace period,
   SIGKILL), exactly like a preemption.
2. When the attempt has vacated (``cluster.settlement``) it ends RECONFIGURED,
   not PREEMPTED, and the job goes back to PENDING (reason Reconfigured) with
   the target still pinned: the snapshot then asks the policy for exactly the
   target plan and GPU count (``scheduler.elastic.spec_fields``).
3. The next ``Start`` of the job (``record_start``, called by the apply step)
   writes the plan and accumulation steps on the new attempt, clears the
   target and returns the launch fields, so the agent tells the process its
   plan, GPU count and accumulation steps.

Pinning rather than relaunching on the recorded placement at once keeps one
writer of allocations (the apply step) and lets any policy place the job
when the recorded GPUs were taken meanwhile; the cost is that the relaunch
waits for the next cycle (one is requested when the attempt exits).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F

from cluster import commands
from scheduler import adaptive_jobs, elastic, measured, transitions
from scheduler.core.decisions import Reconfigure, Start
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Attempt, Job, JobState, NoticeReason, PendingReason
from scheduler.snapshot import JobRow
from scheduler.transitions import Conflict

log = logging.getLogger(__name__)

def describe(plan: str, gpus: int) -> str:
    """``"ga on 2 GPUs"``; a job without a plan is described by its GPUs alone."""
    unit = "GPU" if gpus == 1 else "GPUs"
    return f"{plan} on {gpus} {unit}" if plan else f"{gpus} {unit}"


def apply_reconfigure(d: Reconfigure, row: JobRow, now: datetime) -> bool:
    """Write one Reconfigure (see the module doc); raise ``transitions.Conflict`` when the job is
    no longer RUNNING in the attempt read, or the decision breaks the job's declared range."""
    if row.state != JobState.RUNNING:
        raise Conflict(f"cannot reconfigure a job read as {row.state}")
    job = Job.objects.filter(pk=row.pk).only("model", "plan", "allowed_plans", "num_gpus", "min_gpus",
                                             "max_gpus", "adaptive_app").first()
    if job is None or not (job.model or job.adaptive_app):
        raise Conflict("not a reconfigurable job")
    gpus = d.placement.num_gpus
    low, high = job.gpu_range
    if not low <= gpus <= high:
        raise Conflict(f"{gpus} GPUs is outside the job's range {low}-{high}")
    plan = adaptive_jobs.PLAN if job.adaptive_app else d.plan or job.plan  # adaptive: GPUs and batch change
    if not job.adaptive_app and plan != job.plan and plan not in (job.allowed_plans or []):
        raise Conflict(f"plan {plan!r} is not allowed (allowed: {job.allowed_plans or [job.plan]})")
    moved = transitions.move_set(
        [row.pk], expect=[JobState.RUNNING], to=JobState.PREEMPTING, where={"attempt_count": row.attempt_count},
        reconfiguration_count=F("reconfiguration_count") + 1,
        last_reconfigured_at=now,
        target_plan=plan,
        target_gpus=gpus,
        target_placement=dict(d.placement.parts),
    )
    if moved != 1:
        raise Conflict(f"no longer RUNNING in attempt {row.attempt_count}")
    for_job = int(d.for_job) if d.for_job is not None else None
    old = Attempt.objects.filter(job_id=row.pk, number=row.attempt_count).values_list("plan", flat=True).first()
    Attempt.objects.filter(job_id=row.pk, number=row.attempt_count).update(
        notice_at=now, notice_reason=NoticeReason.RECONFIGURE, preempted_for=for_job
    )
    held = gpu_count(row.allocation)
    change = f"{describe(old or '', held)} -> {describe(plan, gpus)}"
    message = f"{change}: {d.message}" if d.message else change
    transitions.record_event(row.pk, at=now, from_state=JobState.RUNNING, to=JobState.PREEMPTING,
                             reason=PendingReason.RECONFIGURED, message=message)
    for node in row.allocation:
        transaction.on_commit(
            lambda node=node: commands.preempt(node, row.pk, row.attempt_count, float(row.grace_period))
        )
    log.info("job %s reconfigured (%s): attempt %d checkpoints", row.pk, change, row.attempt_count)
    return True


def record_start(job_id: int, number: int, d: Start) -> dict:
    """After the apply step created attempt ``number`` for ``d``: store the plan and
    accumulation steps it runs with, clear the job's target, and return the launch
    fields (``scheduler.elastic.launch_fields``; empty for a job without a plan)."""
    job = Job.objects.filter(pk=job_id).values("plan", "num_gpus", "target_plan", "target_gpus", "adaptive_app",
                                               "max_gpus").first()
    if job is None:
        return {}
    if job["target_gpus"]:
        Job.objects.filter(pk=job_id).update(target_plan="", target_gpus=0, target_placement={})
    if job["adaptive_app"]:
        return _adaptive_start(job_id, number, job, d)
    plan = d.plan or job["target_plan"] or job["plan"]
    if not plan:
        return {}
    gpus = d.placement.num_gpus
    accum = elastic.grad_accum_steps(job["plan"], job["num_gpus"], plan, gpus)
    Attempt.objects.filter(job_id=job_id, number=number).update(plan=plan, grad_accum_steps=accum)
    return elastic.launch_fields(plan=plan, gpus=gpus, grad_accum=accum, requested_gpus=job["num_gpus"])


def _adaptive_start(job_id: int, number: int, job: dict, d: Start) -> dict:
    """An adaptive job's start (``scheduler.adaptive_jobs``): the batch with the most goodput
    on the placement in the epoch the job reported last, stored on the attempt, and its
    launch fields. Without profiles, or on a placement its model cannot run, the job is
    told its GPUs and no batch (it keeps its own)."""
    gpus = d.placement.num_gpus
    model = adaptive_jobs.model_for(job)
    epoch = measured.epochs([job_id]).get(job_id)
    found = adaptive_jobs.configuration(model, dict(d.placement.parts), epoch) if model is not None else None
    _local, steps, batch = found or (0, 1, 0)
    Attempt.objects.filter(job_id=job_id, number=number).update(plan=adaptive_jobs.PLAN, grad_accum_steps=steps,
                                                                batch_size=batch)
    return adaptive_jobs.launch_fields(gpus=gpus, requested_gpus=job["num_gpus"], steps=steps, batch=batch)
