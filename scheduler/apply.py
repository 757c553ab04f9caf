"""Step 3 of a scheduling cycle: apply the policy's decisions with conditional writes.

Contract. ``apply_decisions`` runs inside the caller's ``transaction.atomic``
block (it refuses to run outside one) and sends nothing itself: every agent
command is registered with ``transaction.on_commit``, so a cycle that fails or
is killed half-way leaves neither rows nor commands behind.

Every write is conditional on what the snapshot read, and acts only when it
changed exactly the rows it expected:

* Start: ``Job(id, state=PENDING, attempt_count=n)`` -> STARTING with attempt
  n+1, then each GPU row with ``allocated_to IS NULL`` -> the job. Fewer rows
  than needed (another writer got there first) rolls that start back to its
  savepoint; the job stays PENDING for the next cycle.
* Preempt: ``Job(id, state=<as read>, attempt_count=n)`` -> PREEMPTING, with
  the notice time and the job it is preempted for on the attempt.
* Pend: the reason and message are written only when they changed, with one
  ``filter(pk__in=..., state=PENDING).update(...)`` per distinct reason and
  message (after the starts and preemptions of the cycle).

Each Start and Preempt, each batch of pending reasons and each cancel kill
runs in its own savepoint, so a lost race, or a deadlock PostgreSQL breaks,
undoes that write alone; rows are written in job id order so that concurrent
writers take their locks in the same order.

So two cycles that run at once (the Redis lock makes that rare, not
impossible) never give a job two attempts or a GPU two jobs: the loser's
updates match no row. Quotas are checked again for every Start in the
policy's order, charging each started job, so jobs that are each within a
quota cannot start together beyond it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from cluster import commands
from cluster.models import Gpu, NodeState
from cluster.protocol import EXIT_CANCEL
from portal import realtime
from scheduler import quotas
from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Start
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from scheduler.snapshot import CycleInput, JobRow

log = logging.getLogger(__name__)

MESSAGE_LENGTH = 500  # JobEvent.message and Job.pending_message


class Conflict(Exception):
    """A conditional write found the database changed since the snapshot."""


@dataclass(slots=True)
class Applied:
    """What a cycle changed: job ids started and preempted, pending reasons rewritten,
    decisions skipped because the database had moved on (with why), kills sent for cancels."""

    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pend_updates: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cancel_kills: list[int] = field(default_factory=list)


def apply_decisions(decisions: list[Decision], cycle: CycleInput, at: datetime | None = None) -> Applied:
    """Write ``decisions`` (in the policy's order) against ``cycle``'s rows; see the module doc.

    Rows are stamped with ``at`` (default: now, when writing). It is taken after
    the snapshot was read, so a job's start is never stamped before its
    submission even when the job was committed while the snapshot was read.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("apply_decisions must run inside transaction.atomic(): commands are sent on commit")
    at = at or timezone.now()
    out = Applied()
    pends: dict[tuple[str, str], list[int]] = {}
    # Quotas are charged in the policy's order; rows are then written in job id
    # order, so that concurrent writers take their row locks in the same order.
    for decision in sorted(_with_quota_holds(decisions, cycle), key=lambda d: int(d.job_id)):
        row = cycle.jobs.get(decision.job_id)
        if row is None:
            out.skipped.append((decision.job_id, "not in the snapshot"))
            continue
        if isinstance(decision, Start):
            _guarded(out, decision.job_id, lambda: _start(decision, row, at), out.started)
        elif isinstance(decision, Preempt):
            _guarded(out, decision.job_id, lambda: _preempt(decision, row, at), out.preempted)
        elif isinstance(decision, Pend):
            key = _pend_change(decision, row)
            if key is not None:
                pends.setdefault(key, []).append(row.pk)
        else:
            raise TypeError(f"unknown decision {decision!r}")
    out.pend_updates = _write_pends(pends)
    return out


def _with_quota_holds(decisions: list[Decision], cycle: CycleInput) -> list[Decision]:
    """Starts that would break a quota together with earlier starts become Pend(QuotaExceeded)."""
    result: list[Decision] = []
    for d in decisions:
        row = cycle.jobs.get(d.job_id)
        if isinstance(d, Start) and row is not None:
            hold = quotas.blocking_reason(row, cycle.usage)
            if hold is not None:
                result.append(Pend(d.job_id, Reason.QUOTA_EXCEEDED, hold[1]))
                continue
            cycle.usage.charge(row)
        result.append(d)
    return result


def _guarded(out: Applied, job_id: str, write, done: list[int]) -> None:  # noqa: ANN001
    """Run one decision's writes in a savepoint; a conflict or a lost race undoes only them."""
    try:
        with transaction.atomic():
            if write():
                done.append(int(job_id))
    except Conflict as exc:
        out.skipped.append((job_id, str(exc)))
        log.info("job %s: decision skipped: %s", job_id, exc)
    except DatabaseError as exc:  # a deadlock or serialization failure with a concurrent writer
        out.skipped.append((job_id, f"database: {exc}"))
        log.warning("job %s: decision rolled back by the database: %s", job_id, exc)


def _event(job_id: int, at: datetime, from_state: str, to_state: str, reason: str, message: str) -> None:
    JobEvent.objects.create(
        job_id=job_id, at=at, from_state=from_state, to_state=to_state, reason=reason, message=message[:MESSAGE_LENGTH]
    )


def _allocate(job_id: int, node: str, count: int) -> list[int]:
    """Give ``count`` free GPUs of ``node`` to the job (lowest indices first); raise Conflict if taken."""
    free = list(
        Gpu.objects.filter(node__name=node, node__state=NodeState.UP, allocated_to__isnull=True, index__lt=F("node__gpus"))
        .order_by("index")
        .values_list("pk", "index")[:count]
    )
    if len(free) < count:
        raise Conflict(f"{node} has {len(free)} free GPUs, {count} needed")
    taken = Gpu.objects.filter(pk__in=[pk for pk, _ in free], allocated_to__isnull=True).update(allocated_to=job_id)
    if taken != count:
        raise Conflict(f"{node}: {count - taken} of the chosen GPUs were taken meanwhile")
    return [index for _, index in free]


def _start(d: Start, row: JobRow, now: datetime) -> bool:
    number = row.attempt_count + 1
    moved = Job.objects.filter(pk=row.pk, state=JobState.PENDING, attempt_count=row.attempt_count).update(
        state=JobState.STARTING,
        attempt_count=number,
        started_at=now,
        first_started_at=Coalesce(F("first_started_at"), Value(now)),
        pending_reason="",
        pending_message="",
    )
    if moved != 1:
        raise Conflict("no longer PENDING with the attempt count read")
    allocation = {node: _allocate(row.pk, node, count) for node, count in d.placement.parts}
    Attempt.objects.create(job_id=row.pk, number=number, gpu_allocation=allocation, state=AttemptState.STARTING, started_at=now)
    _event(row.pk, now, JobState.PENDING, JobState.STARTING, d.reason.value, d.message)
    for node, indices in allocation.items():
        cmd = commands.launch_for(row, number, indices)
        transaction.on_commit(lambda node=node, cmd=cmd: commands.launch(node, cmd))
    return True


def _preempt(d: Preempt, row: JobRow, now: datetime) -> bool:
    if row.state not in (JobState.STARTING, JobState.RUNNING):
        raise Conflict(f"cannot preempt a job read as {row.state}")
    moved = Job.objects.filter(pk=row.pk, state=row.state, attempt_count=row.attempt_count).update(
        state=JobState.PREEMPTING, preemption_count=F("preemption_count") + 1
    )
    if moved != 1:
        raise Conflict(f"no longer {row.state} in attempt {row.attempt_count}")
    for_job = int(d.for_job) if d.for_job is not None else None
    Attempt.objects.filter(job_id=row.pk, number=row.attempt_count).update(notice_at=now, preempted_for=for_job)
    _event(row.pk, now, row.state, JobState.PREEMPTING, d.reason.value, d.message)
    for node in row.allocation:
        transaction.on_commit(
            lambda node=node: commands.preempt(node, row.pk, row.attempt_count, float(row.grace_period))
        )
    return True


def _pend_change(d: Pend, row: JobRow) -> tuple[str, str] | None:
    """The (reason, message) to store for a pending job, or None when it has not changed."""
    reason, message = d.reason.value, d.message[:MESSAGE_LENGTH]
    if row.state != JobState.PENDING or (reason, message) == (row.pending_reason, row.pending_message):
        return None
    return reason, message


PEND_BATCH = 2000


def _write_pends(pends: dict[tuple[str, str], list[int]]) -> int:
    """Store pending reasons with one conditional UPDATE per distinct (reason, message) and batch of
    jobs, not one per job: with thousands of jobs waiting, a row each made the cycle seconds long.
    Returns the rows written."""
    written = 0
    for (reason, message), ids in pends.items():
        for start in range(0, len(ids), PEND_BATCH):
            batch = ids[start:start + PEND_BATCH]
            try:
                with transaction.atomic():  # a savepoint: a deadlock loses only this batch's reasons
                    changed = Job.objects.filter(pk__in=batch, state=JobState.PENDING).update(
                        pending_reason=reason, pending_message=message)
            except DatabaseError as exc:
                log.warning("pending reasons of %d jobs not written (next cycle retries): %s", len(batch), exc)
                continue
            if changed:
                # No JobEvent is written for a new reason. A job of the batch that left PENDING
                # meanwhile gets a hint too: harmless, a hint only makes a page re-read.
                for pk in batch:
                    realtime.publish_job_changed(pk)
            written += changed
    return written


def request_cancel_kills(now: datetime) -> list[int]:
    """Stop the processes of CANCELLING jobs not yet told to stop (AGENT_KILL on commit).

    The cancel service only moves the job to CANCELLING; this sets the attempt's
    ``notice_at`` (conditionally, so the kill is sent once) and sends SIGTERM,
    then SIGKILL after the job's grace period. Returns the job ids.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("request_cancel_kills must run inside transaction.atomic()")
    out = Applied()
    attempts = Attempt.objects.filter(
        job__state=JobState.CANCELLING, number=F("job__attempt_count"), notice_at__isnull=True
    ).select_related("job").order_by("job_id")
    for attempt in attempts:
        _guarded(out, str(attempt.job_id), lambda attempt=attempt: _cancel_kill(attempt, now), out.cancel_kills)
    return out.cancel_kills


def _cancel_kill(attempt: Attempt, now: datetime) -> bool:
    if Attempt.objects.filter(pk=attempt.pk, notice_at__isnull=True).update(notice_at=now) != 1:
        return False  # another cycle has sent it
    job = attempt.job
    for node in attempt.gpu_allocation or {}:
        transaction.on_commit(
            lambda node=node: commands.kill(node, job.pk, attempt.number, float(job.grace_period), EXIT_CANCEL)
        )
    return True
