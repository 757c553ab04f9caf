"""A cycle's starts and preemptions, written as sets: check each against its locked row, claim GPUs, write.

The caller (``scheduler.apply``) has locked the jobs' rows in id order; here
the free GPU rows of the nodes the starts use are locked (after the job rows,
in id order), each decision is checked against what the snapshot read, and
the ones that pass are written with a few statements. Agent commands go out
on commit (``cluster.commands.on_commit``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.db.models import F, Value
from django.db.models.functions import Coalesce

from cluster import commands
from cluster.models import Gpu, NodeState
from scheduler import confinement, reconfigure, row_locks, transitions
from scheduler.applied import Applied
from scheduler.bulkwrite import id_set, insert_objects, update_each
from scheduler.core.decisions import Preempt, Start
from scheduler.models import Attempt, AttemptState, Job, JobState
from scheduler.snapshot import JobRow
from scheduler.transitions import Conflict

PREEMPTIBLE = (JobState.STARTING, JobState.RUNNING)


class Held:
    """What a job's lock found when its row was passed over (``scheduler.row_locks``)."""


#: A job whose row another transaction held past the wait limit, or that was deleted.
HELD = Held()


def may_start(row: JobRow, now: tuple[str, int] | Held | None, out: Applied, on_hold: bool = False) -> bool:
    """Whether the start read for ``row`` still stands: the job is PENDING with the attempt count read and
    (``on_hold``) no person has held it back since the read; else the decision is skipped, saying why."""
    if now != (JobState.PENDING, row.attempt_count):
        out.skip(row.pk, _gone(now) or "no longer PENDING with the attempt count read")
    elif on_hold:
        out.skip(row.pk, "held since the cycle read it")
    else:
        return True
    return False


def may_preempt(row: JobRow, now: tuple[str, int] | Held | None, out: Applied) -> bool:
    if row.state not in PREEMPTIBLE:
        out.skip(row.pk, f"cannot preempt a job read as {row.state}")
    elif now != (row.state, row.attempt_count):
        out.skip(row.pk, _gone(now) or f"no longer {row.state} in attempt {row.attempt_count}")
    else:
        return True
    return False


def _gone(now: tuple[str, int] | Held | None) -> str:
    """Why a job's row was not found when locked, or "" when it was."""
    if now is HELD:
        return "row held by another transaction past SCHEDULER_ROW_LOCK_WAIT, or deleted: a later cycle tries again"
    return "deleted" if now is None else ""


@dataclass(frozen=True, slots=True)
class _Claim:
    """A start that got its GPUs: ``{node: [(index, gpu row id), ...]}`` (indices ascending)."""

    decision: Start
    row: JobRow
    gpus: dict[str, list[tuple[int, int]]]

    @property
    def allocation(self) -> dict[str, list[int]]:
        return {node: [index for index, _ in pairs] for node, pairs in self.gpus.items()}


def claim_gpus(starts: list[tuple[Start, JobRow]], out: Applied) -> list[_Claim]:
    """Lock the free GPUs of the nodes the starts use and hand them out in the policy's order,
    lowest indices first. A start that cannot get all its GPUs (another writer took some
    since the snapshot) gets none, on any node, and is skipped."""
    if not starts:
        return []
    nodes = {node for d, _ in starts for node, _ in d.placement.parts}
    free: dict[str, list[tuple[int, int]]] = defaultdict(list)
    # A GPU row another transaction holds past the wait limit counts as not free in this cycle.
    rows, _ = row_locks.locked(
        Gpu.objects.filter(node__name__in=nodes, node__state=NodeState.UP, allocated_to__isnull=True,
                           healthy=True, index__lt=F("node__gpus"))
        .order_by("pk").values_list("node__name", "index", "pk"), of=("self",), what="GPU rows")
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


def write_starts(claims: list[_Claim], at: datetime, out: Applied) -> None:
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
    insert_objects([
        Attempt(job_id=c.row.pk, number=c.row.attempt_count + 1, gpu_allocation=c.allocation,
                state=AttemptState.STARTING, started_at=at)
        for c in claims
    ])
    launches = {c.row.pk: _plan_fields(c) for c in claims}  # after the attempts exist (reconfigure.record_start)
    confined = confinement.launch_fields(launches)  # run_as, limits, image: one query
    transitions.record_events([
        transitions.event(c.row.pk, at=at, from_state=JobState.PENDING, to=JobState.STARTING,
                          reason=c.decision.reason.value, message=c.decision.message)
        for c in claims
    ])
    sends = []
    addresses = commands.node_addresses({node for c in claims for node in c.gpus})  # rank 0's is the master
    # Read here, for the jobs launched only: the cycle's rows leave the commands out (``JobRow``).
    command_of = dict(Job.objects.filter(pk__in=id_set(ids)).values_list("pk", "command"))
    for c in sorted(claims, key=lambda c: c.row.pk):
        for node, cmd in commands.launches_for(c.row, c.row.attempt_count + 1, c.allocation, addresses,
                                               command=command_of[c.row.pk],
                                               **launches[c.row.pk], **confined[c.row.pk]):
            sends.append(lambda node=node, cmd=cmd: commands.launch(node, cmd))
        out.started.append(c.row.pk)
    commands.on_commit(sends)


def _plan_fields(claim: _Claim) -> dict:
    """The plan a start launches with (reconfigurable jobs; ``scheduler.reconfigure``), {} for others."""
    if not (claim.decision.plan or claim.row.plan or claim.row.target_gpus or claim.row.adaptive):
        return {}
    return reconfigure.record_start(claim.row.pk, claim.row.attempt_count + 1, claim.decision)


def write_preemptions(preempts: list[tuple[Preempt, JobRow]], at: datetime, out: Applied) -> None:
    if not preempts:
        return
    ids = [row.pk for _, row in preempts]
    moved = transitions.move_set(ids, expect=PREEMPTIBLE, to=JobState.PREEMPTING,
                                 preemption_count=F("preemption_count") + 1)
    current = {row.pk: row.attempt_count for _, row in preempts}
    attempts = {job: pk for pk, job, number in Attempt.objects.filter(job_id__in=id_set(ids))
                .values_list("pk", "job_id", "number") if current[job] == number}
    noticed = update_each(Attempt, ["notice_at", "preempted_for"], {
        attempts[row.pk]: (at, int(d.for_job) if d.for_job is not None else None)
        for d, row in preempts if row.pk in attempts
    })
    if moved != len(ids) or noticed != len(ids):  # impossible under the locks; never half-apply
        raise Conflict(f"locked rows changed: {moved} of {len(ids)} jobs, {noticed} attempts written")
    transitions.record_events([
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
    commands.on_commit(sends)
