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
   its result.
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
``scheduler.bulkwrite``), each batch in a savepoint.

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
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from cluster import commands
from cluster.models import Gpu, NodeState
from cluster.protocol import EXIT_CANCEL
from scheduler import announce, quotas, reconfigure, transitions
from scheduler.bulkwrite import update_each
from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Reconfigure, Start
from scheduler.models import Attempt, AttemptState, Job, JobEvent, JobState
from scheduler.transitions import MESSAGE_LENGTH, Conflict
from scheduler.snapshot import CycleInput, JobRow

log = logging.getLogger(__name__)

PREEMPTIBLE = (JobState.STARTING, JobState.RUNNING)


@dataclass(slots=True)
class Applied:
    """What a cycle changed: job ids started and preempted, pending reasons rewritten,
    decisions skipped because the database had moved on (with why), kills sent for cancels."""

    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    reconfigured: list[int] = field(default_factory=list)
    pend_updates: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cancel_kills: list[int] = field(default_factory=list)

    def skip(self, job_id: int | str, why: str) -> None:
        self.skipped.append((str(job_id), why))
        log.info("job %s: decision skipped: %s", job_id, why)


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
    """
    if not connection.in_atomic_block:
        raise RuntimeError("apply_decisions must run inside transaction.atomic(): commands are sent on commit")
    at = at or timezone.now()
    out = Applied()
    todo = _sort(_with_quota_holds(decisions, cycle, out), cycle, out)
    for d, row in sorted(todo.reconfigures, key=lambda item: item[1].pk):  # scheduler/reconfigure.py
        _guarded(out, [d.job_id], lambda d=d, row=row: _one(reconfigure.apply_reconfigure(d, row, at), row,
                                                               out.reconfigured))
    if todo.starts or todo.preempts:
        ids = [d.job_id for d, _ in todo.preempts] + [d.job_id for d, _ in todo.starts]
        batch = Applied()  # reported only if its savepoint commits: a rolled-back batch skips all its jobs
        if _guarded(out, ids, lambda: _starts_and_preemptions(todo, at, batch)):
            out.started, out.preempted = batch.started, batch.preempted
            out.skipped.extend(batch.skipped)
    out.pend_updates = _write_pends(todo.pends)
    return out


def _sort(decisions: list[Decision], cycle: CycleInput, out: Applied) -> _Sorted:
    todo = _Sorted()
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
            change = _pend_change(d, row)
            if change is not None:
                todo.pends[row.pk] = change
        else:
            raise TypeError(f"unknown decision {d!r}")
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
            extra = size - sum(len(indices) for indices in row.allocation.values())
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


def _guarded(out: Applied, job_ids: list[str], write: Callable[[], None]) -> bool:
    """Run writes in a savepoint; a conflict or an error of the database undoes only them
    and skips the decisions about ``job_ids`` (their jobs wait for the next cycle).
    Returns whether the writes stand."""
    try:
        with transaction.atomic():
            write()
        return True
    except Conflict as exc:
        for job_id in job_ids:
            out.skip(job_id, str(exc))
    except DatabaseError as exc:  # a deadlock or serialization failure with a concurrent writer
        log.warning("decisions about %d jobs rolled back by the database: %s", len(job_ids), exc)
        for job_id in job_ids:
            out.skipped.append((str(job_id), f"database: {exc}"))
    return False


# --- starts and preemptions: lock, check, write ------------------------------------------


def _starts_and_preemptions(todo: _Sorted, at: datetime, out: Applied) -> None:
    current = _lock_jobs([row.pk for _, row in todo.preempts] + [row.pk for _, row in todo.starts])
    preempts = [(d, row) for d, row in todo.preempts if _may_preempt(row, current.get(row.pk), out)]
    starts = [(d, row) for d, row in todo.starts if _may_start(row, current.get(row.pk), out)]
    _write_preemptions(preempts, at, out)
    _write_starts(_claim_gpus(starts, out), at, out)


def _lock_jobs(ids: list[int]) -> dict[int, tuple[str, int]]:
    """Lock the jobs (in id order) and return their ``(state, attempt_count)`` as of now."""
    rows = (Job.objects.filter(pk__in=ids).order_by("pk").select_for_update()
            .values_list("pk", "state", "attempt_count"))
    return {pk: (state, attempts) for pk, state, attempts in rows}


def _may_start(row: JobRow, now: tuple[str, int] | None, out: Applied) -> bool:
    if now == (JobState.PENDING, row.attempt_count):
        return True
    out.skip(row.pk, "no longer PENDING with the attempt count read" if now else "deleted")
    return False


def _may_preempt(row: JobRow, now: tuple[str, int] | None, out: Applied) -> bool:
    if row.state not in PREEMPTIBLE:
        out.skip(row.pk, f"cannot preempt a job read as {row.state}")
    elif now != (row.state, row.attempt_count):
        out.skip(row.pk, f"no longer {row.state} in attempt {row.attempt_count}")
    else:
        return True
    return False


@dataclass(frozen=True, slots=True)
class _Claim:
    """A start that got its GPUs: ``{node: [(index, gpu row id), ...]}`` (indices ascending)."""

    decision: Start
    row: JobRow
    gpus: dict[str, list[tuple[int, int]]]

    @property
    def allocation(self) -> dict[str, list[int]]:
        return {node: [index for index, _ in pairs] for node, pairs in self.gpus.items()}


def _claim_gpus(starts: list[tuple[Start, JobRow]], out: Applied) -> list[_Claim]:
    """Lock the free GPUs of the nodes the starts use and hand them out in the policy's order,
    lowest indices first. A start that cannot get all its GPUs (another writer took some
    since the snapshot) gets none, on any node, and is skipped."""
    if not starts:
        return []
    nodes = {node for d, _ in starts for node, _ in d.placement.parts}
    free: dict[str, list[tuple[int, int]]] = defaultdict(list)
    rows = (Gpu.objects.filter(node__name__in=nodes, node__state=NodeState.UP, allocated_to__isnull=True,
                               index__lt=F("node__gpus"))
            .order_by("pk").select_for_update(of=("self",)).values_list("node__name", "index", "pk"))
    for node, index, pk in rows:
        free[node].append((index, pk))
    for pairs in free.values():
        pairs.sort(reverse=True)  # the lowest index is popped first
    claims = []
    for d, row in starts:
        short = [f"{node} has {len(free[node])} free GPUs, {count} needed"
                 for node, count in d.placement.parts if len(free[node]) < count]
        if short:
            out.skip(row.pk, "; ".join(short))
            continue
        gpus = {node: sorted(free[node].pop() for _ in range(count)) for node, count in d.placement.parts}
        claims.append(_Claim(d, row, gpus))
    return claims


def _write_starts(claims: list[_Claim], at: datetime, out: Applied) -> None:
    if not claims:
        return
    ids = [c.row.pk for c in claims]
    moved = transitions.move_set(
        ids, expect=[JobState.PENDING], to=JobState.STARTING,
        attempt_count=F("attempt_count") + 1,
        started_at=at,
        first_started_at=Coalesce(F("first_started_at"), Value(at)),
        pending_reason="",
        pending_message="",
    )
    holder = {gpu: c.row.pk for c in claims for pairs in c.gpus.values() for _, gpu in pairs}
    taken = update_each(Gpu, ["allocated_to"], {gpu: (job,) for gpu, job in holder.items()},
                        where={"allocated_to": None})
    if moved != len(ids) or taken != len(holder):  # impossible under the locks; never half-apply
        raise Conflict(f"locked rows changed: {moved} of {len(ids)} jobs, {taken} of {len(holder)} GPUs written")
    Attempt.objects.bulk_create(
        Attempt(job_id=c.row.pk, number=c.row.attempt_count + 1, gpu_allocation=c.allocation,
                state=AttemptState.STARTING, started_at=at)
        for c in claims
    )
    launches = {c.row.pk: _plan_fields(c) for c in claims}  # after the attempts exist (reconfigure.record_start)
    _write_events([
        transitions.event(c.row.pk, at=at, from_state=JobState.PENDING, to=JobState.STARTING,
                          reason=c.decision.reason.value, message=c.decision.message)
        for c in claims
    ])
    sends = []
    addresses = commands.node_addresses({node for c in claims for node in c.gpus})  # rank 0's is the master
    for c in sorted(claims, key=lambda c: c.row.pk):
        for node, cmd in commands.launches_for(c.row, c.row.attempt_count + 1, c.allocation, addresses,
                                               **launches[c.row.pk]):
            sends.append(lambda node=node, cmd=cmd: commands.launch(node, cmd))
        out.started.append(c.row.pk)
    _on_commit(sends)


def _plan_fields(claim: _Claim) -> dict:
    """The plan a start launches with (reconfigurable jobs; ``scheduler.reconfigure``), {} for others."""
    if not (claim.decision.plan or claim.row.plan or claim.row.target_gpus):
        return {}
    return reconfigure.record_start(claim.row.pk, claim.row.attempt_count + 1, claim.decision)


def _write_preemptions(preempts: list[tuple[Preempt, JobRow]], at: datetime, out: Applied) -> None:
    if not preempts:
        return
    ids = [row.pk for _, row in preempts]
    moved = transitions.move_set(ids, expect=PREEMPTIBLE, to=JobState.PREEMPTING,
                                 preemption_count=F("preemption_count") + 1)
    current = {row.pk: row.attempt_count for _, row in preempts}
    attempts = {job: pk for pk, job, number in Attempt.objects.filter(job_id__in=ids)
                .values_list("pk", "job_id", "number") if current[job] == number}
    noticed = update_each(Attempt, ["notice_at", "preempted_for"], {
        attempts[row.pk]: (at, int(d.for_job) if d.for_job is not None else None)
        for d, row in preempts if row.pk in attempts
    })
    if moved != len(ids) or noticed != len(ids):  # impossible under the locks; never half-apply
        raise Conflict(f"locked rows changed: {moved} of {len(ids)} jobs, {noticed} attempts written")
    _write_events([
        transitions.event(row.pk, at=at, from_state=row.state, to=JobState.PREEMPTING,
                          reason=d.reason.value, message=d.message)
        for d, row in preempts
    ])
    sends = []
    for _, row in sorted(preempts, key=lambda item: item[1].pk):
        for node in row.allocation:
            sends.append(
                lambda node=node, row=row: commands.preempt(node, row.pk, row.attempt_count, float(row.grace_period))
            )
        out.preempted.append(row.pk)
    _on_commit(sends)


def _on_commit(sends: list[Callable[[], object]]) -> None:
    """Send agent commands after the commit, all from one callback (one per command cost
    ~0.1 ms each to register at thousands per cycle). ``commands`` never raise: a command
    the broker refuses is logged and the tick re-sends it, so one cannot stop the others."""
    if sends:
        transaction.on_commit(lambda: [send() for send in sends])


def _write_events(events: list[JobEvent]) -> None:
    """Store a set's transitions (``transitions.record_events``); tests fail a cycle half-way here."""
    transitions.record_events(events)


# --- pending reasons --------------------------------------------------------------------


def _pend_change(d: Pend, row: JobRow) -> tuple[str, str] | None:
    """The (reason, message) to store for a pending job, or None when it has not changed."""
    reason, message = d.reason.value, d.message[:MESSAGE_LENGTH]
    if row.state != JobState.PENDING or (reason, message) == (row.pending_reason, row.pending_message):
        return None
    return reason, message


PEND_BATCH = 5000


def _write_pends(pends: dict[int, tuple[str, str]]) -> int:
    """Store pending reasons with one conditional UPDATE per batch of jobs, each row its own
    reason and message (``scheduler.bulkwrite``): with thousands of jobs waiting, an UPDATE per
    job, or per distinct message, made the cycle seconds long. Returns the rows written."""
    written = 0
    ids = sorted(pends)  # id order, as every writer of job rows
    for start in range(0, len(ids), PEND_BATCH):
        batch = {pk: pends[pk] for pk in ids[start:start + PEND_BATCH]}
        try:
            with transaction.atomic():  # a savepoint: a deadlock loses only this batch's reasons
                changed = update_each(Job, ["pending_reason", "pending_message"], batch,
                                      where={"state": JobState.PENDING})
        except DatabaseError as exc:
            log.warning("pending reasons of %d jobs not written (next cycle retries): %s", len(batch), exc)
            continue
        if changed:
            # No JobEvent is written for a new reason. A job of the batch that left PENDING
            # meanwhile gets a hint too: harmless, a hint only makes a page re-read.
            for pk in batch:
                announce.job_changed(pk)
        written += changed
    return written


# --- cancellations ----------------------------------------------------------------------


def request_cancel_kills(now: datetime) -> list[int]:
    """Stop the processes of CANCELLING jobs not yet told to stop (AGENT_KILL on commit).

    The cancel service only moves the job to CANCELLING; this sets the attempt's
    ``notice_at`` (conditionally, so the kill is sent once) and sends SIGTERM,
    then SIGKILL after the job's grace period. The attempts are locked first (in
    job id order) and only those still without a notice are written, so two
    cycles at once send each kill once. Returns the job ids.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("request_cancel_kills must run inside transaction.atomic()")
    out, batch = Applied(), Applied()
    if _guarded(out, [], lambda: _cancel_kills(now, batch)):
        return batch.cancel_kills
    return []


def _cancel_kills(now: datetime, out: Applied) -> None:
    attempts = list(
        Attempt.objects.filter(job__state=JobState.CANCELLING, number=F("job__attempt_count"), notice_at__isnull=True)
        .order_by("job_id").select_for_update(of=("self",))
        .values_list("pk", "job_id", "number", "gpu_allocation", "job__grace_period")
    )
    if not attempts:
        return
    Attempt.objects.filter(pk__in=[pk for pk, *_ in attempts]).update(notice_at=now)
    sends = []
    for _, job_id, number, allocation, grace in attempts:
        for node in allocation or {}:
            sends.append(lambda node=node, job_id=job_id, number=number, grace=grace:
                         commands.kill(node, job_id, number, float(grace), EXIT_CANCEL))
        out.cancel_kills.append(job_id)
    _on_commit(sends)
