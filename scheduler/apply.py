"""Step 3 of a scheduling cycle: apply the policy's decisions with set-based conditional writes.

Contract. ``apply_decisions`` runs inside the caller's ``transaction.atomic``
block (it refuses to run outside one) and sends nothing itself: every agent
command is registered with ``transaction.on_commit``, so a cycle that fails or
is killed half-way leaves neither rows nor commands behind.

A cycle's starts and preemptions are written together, as sets, in three
steps: *lock, check, write*.

1. Lock: every job to start or preempt is locked with one
   ``SELECT ... ORDER BY id FOR UPDATE``, then the free GPU rows of the nodes
   the starts use with another (GPU rows after job rows, each in id order, so
   concurrent loops take their locks in the same order and cannot deadlock
   each other). A lock waits for a concurrent writer to commit and then reads
   its result, for at most ``SCHEDULER_ROW_LOCK_WAIT`` seconds: a row held
   longer is passed over and its job waits for a later cycle, so that one
   stuck transaction holds up only its own rows (``scheduler.row_locks``).
2. Check, in Python, against what the snapshot read: a Start needs its job
   still ``PENDING`` with the attempt count read, and enough free GPUs on
   every node of its placement (GPUs are handed out in the policy's order,
   lowest indices first); a Preempt needs its job still in the state and
   attempt read. A decision that fails its check is skipped whole (it claims
   no GPU on any node) and the job waits for the next cycle.
3. Write the winners with a few statements whatever their number: one
   ``UPDATE`` of the started jobs, one of the GPU rows (each its own job),
   ``bulk_create`` of the attempts and the ``JobEvent`` rows, one ``UPDATE``
   of the preempted jobs and one of their attempts (notice time, the job
   preempted for).

Because the rows are locked before they are checked, nothing can change
between the check and the write: a decision is applied whole or skipped
whole. The writes run in one savepoint; should PostgreSQL still break a
deadlock (with a writer that locks in another order), that savepoint rolls
back, the cycle's starts and preemptions are skipped and the next cycle
decides again.

Pend: the reason and message are written only when they changed, with one
``UPDATE ... WHERE state = PENDING`` per batch of jobs (each its own values;
``scheduler.bulkwrite``), each batch in a savepoint; thousands of them at once
are written meanwhile by a thread of their own, each batch committed on its own
(``scheduler.pending_reasons.write_pends_beside``).

Reconfigure decisions are written one by one by ``scheduler.reconfigure``,
each in its own savepoint, before the starts and preemptions.

So two cycles that run at once (the Redis lock makes that rare, not
impossible) never give a job two attempts or a GPU two jobs: the loser finds
the rows changed once it gets their locks. Quotas are checked again for every
Start (with the GPUs of its placement) and every Reconfigure that grows a job
(with the extra GPUs) in the policy's order, charging each, so jobs that are
each within a quota cannot start or grow together beyond it; a grow that would
break a quota is skipped and the job keeps running as it is.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.utils import timezone

from scheduler import pending_reasons, quotas, reconfigure, row_locks, starts_and_preemptions
from scheduler.applied import Applied, guarded
from scheduler.bulkwrite import id_set
from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Reconfigure, Start
from scheduler.gpu_allocation import gpu_count
from scheduler.models import Job
from scheduler.snapshot import CycleInput, JobRow

__all__ = ("Applied", "apply_decisions")

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Sorted:
    """A cycle's decisions by kind, each with the row it is written against (policy order)."""

    starts: list[tuple[Start, JobRow]] = field(default_factory=list)
    preempts: list[tuple[Preempt, JobRow]] = field(default_factory=list)
    reconfigures: list[tuple[Reconfigure, JobRow]] = field(default_factory=list)
    pends: dict[int, tuple[str, str]] = field(default_factory=dict)


def apply_decisions(decisions: list[Decision], cycle: CycleInput, at: datetime | None = None) -> Applied:
    """Write ``decisions`` (in the policy's order) against ``cycle``'s rows; see the module doc.

    Rows are stamped with ``at`` (default: now, when writing). It is taken after
    the snapshot was read, so a job's start is never stamped before its
    submission even when the job was committed while the snapshot was read.
    Starts are stamped later still, once their GPUs are locked, so a start is
    never stamped before the end of the job that last held its GPU.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("apply_decisions must run inside transaction.atomic(): commands are sent on commit")
    at = at or timezone.now()
    out = Applied()
    todo = _sort(_with_quota_holds(decisions, cycle, out), cycle, out, at)
    finish_pends = pending_reasons.write_pends_beside(todo.pends)  # many: written alongside the rest
    for d, row in sorted(todo.reconfigures, key=lambda item: item[1].pk):  # scheduler/reconfigure.py
        guarded(out, [d.job_id], lambda d=d, row=row: _one(reconfigure.apply_reconfigure(d, row, at), row,
                                                               out.reconfigured))
    if todo.starts or todo.preempts:
        ids = [d.job_id for d, _ in todo.preempts] + [d.job_id for d, _ in todo.starts]
        batch = Applied()  # reported only if its savepoint commits: a rolled-back batch skips all its jobs
        if guarded(out, ids, lambda: _starts_and_preemptions(todo, at, batch)):
            out.started, out.preempted = batch.started, batch.preempted
            out.skipped.extend(batch.skipped)
    out.pend_updates = finish_pends()
    return out


def _sort(decisions: list[Decision], cycle: CycleInput, out: Applied, at: datetime) -> _Sorted:
    todo = _Sorted()
    pends: list[tuple[Pend, JobRow]] = []
    for d in decisions:
        row = cycle.jobs.get(d.job_id)
        if row is None:
            out.skip(d.job_id, "not in the snapshot")
        elif isinstance(d, Start):
            todo.starts.append((d, row))
        elif isinstance(d, Preempt):
            todo.preempts.append((d, row))
        elif isinstance(d, Reconfigure):
            todo.reconfigures.append((d, row))
        elif isinstance(d, Pend):
            pends.append((d, row))
        else:
            raise TypeError(f"unknown decision {d!r}")
    now = cycle.now.timestamp()  # the policy's clock, which its Pends' expected ends are on
    vacated = pending_reasons.vacated_by(todo.preempts, at.timestamp())  # the notices are stamped ``at``
    for d, row in pends:
        change = pending_reasons.pend_change(d, row, now, vacated.get(d.job_id))
        if change is not None:
            todo.pends[row.pk] = change
    return todo


def _with_quota_holds(decisions: list[Decision], cycle: CycleInput, out: Applied) -> list[Decision]:
    """Check every Start and every grow against the quotas, in the policy's order, each seeing
    the GPUs the earlier ones were charged.

    A Start is checked with its placement's GPU count (a reconfigurable job may start on
    more than it asked, and a pinned relaunch on its target); one that would break a
    quota becomes Pend(QuotaExceeded). A Reconfigure onto more GPUs than the job holds is
    checked with the extra GPUs; one that would break a quota is skipped (the job keeps
    running as it is, the reason is logged with the cycle's skipped decisions). A shrink
    is never held. The policy sees quota holds only for pending jobs (the snapshot), so
    this is where a grow meets them.
    """
    result: list[Decision] = []
    for d in decisions:
        row = cycle.jobs.get(d.job_id)
        if isinstance(d, Start) and row is not None:
            gpus = d.placement.num_gpus
            hold = quotas.blocking_reason(row, cycle.usage, gpus)
            if hold is not None:
                result.append(Pend(d.job_id, Reason.QUOTA_EXCEEDED, hold[1]))
                continue
            cycle.usage.charge(row, gpus)
        elif isinstance(d, Reconfigure) and row is not None:
            size = d.placement.num_gpus
            extra = size - gpu_count(row.allocation)
            found = quotas.grow_violation(row, cycle.usage, size, extra)
            if found is not None:
                out.skip(d.job_id, f"{found.reason}: {found.message}")
                continue
            if extra > 0:
                cycle.usage.charge_grow(row, extra)
        result.append(d)
    return result


def _one(done: bool, row: JobRow, into: list[int]) -> None:
    if done:
        into.append(row.pk)


def _starts_and_preemptions(todo: _Sorted, at: datetime, out: Applied) -> None:
    current, held, on_hold = _lock_jobs([row.pk for _, row in todo.preempts] + [row.pk for _, row in todo.starts])
    preempts = [(d, row) for d, row in todo.preempts
                if starts_and_preemptions.may_preempt(row, current.get(row.pk, held), out)]
    starts = [(d, row) for d, row in todo.starts
              if starts_and_preemptions.may_start(row, current.get(row.pk, held), out, row.pk in on_hold)]
    starts_and_preemptions.write_preemptions(preempts, at, out)
    claims = starts_and_preemptions.claim_gpus(starts, out)
    # Starts are stamped once their GPUs are locked: a GPU freed by an exit committed after ``at`` may be
    # among them, and a start stamped ``at`` would then seem to begin before that job's end.
    starts_and_preemptions.write_starts(claims, max(at, timezone.now()), out)


def _lock_jobs(ids: list[int]) -> tuple[dict[int, tuple[str, int]], starts_and_preemptions.Held | None, set[int]]:
    """Lock the jobs (in id order) and return their ``(state, attempt_count)`` as of now, ``HELD``
    when some row was passed over, held by another transaction (``scheduler.row_locks``): a job
    missing from the result was then deleted or is held; and the ids of those a person holds back
    now (``scheduler.holds``: a hold placed since the cycle's read stops its start)."""
    rows, passed_over = row_locks.locked(
        Job.objects.filter(pk__in=id_set(ids)).order_by("pk").values_list("pk", "state", "attempt_count", "hold"),
        what="job rows")
    return ({pk: (state, attempts) for pk, state, attempts, _ in rows},
            starts_and_preemptions.HELD if passed_over else None, {pk for pk, _, _, hold in rows if hold})
