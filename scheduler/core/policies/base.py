"""The queue discipline every policy shares, and the per-call working state.

BE queue discipline (all policies except ``fifo-strict``):

* Jobs are considered by priority (higher first), then in arrival order
  (submit time, then job id), which the snapshot already guarantees; with
  equal priorities nothing is re-sorted (``scheduler.core.queue_order``).
* A job that does not fit does not block the jobs behind it.
* A job with a ``hold_reason`` (e.g. QuotaExceeded) stays pending with that
  reason and blocks nobody.
* Anti-starvation (``starvation_threshold``): when the oldest eligible job of
  the queue has waited longer than the threshold and does not fit, it gets a
  reservation (see ``scheduler.core.reservation``) and the jobs behind it may
  not start on the reserved nodes; they get ``Reservation`` when that is what
  stops them. With fair share on, the head of each tenant below its part gets
  one instead (``scheduler.core.policies.starvation``), on nodes of its own.

Every pending job that is not started gets exactly one ``Pend`` with a reason
and a message, unless the policy is built with ``explain=False``: then no
``Pend`` is emitted at all (only ``Start`` and ``Preempt``), and once no GPU is
free the rest of the queue is not even looked at. The simulator uses that; the
live loop keeps the default.
"""

from __future__ import annotations

import math
from itertools import islice
from typing import Container, Sequence

from scheduler.core.decisions import Decision, Pend, Reason, Start
from scheduler.core.model import PendingJob, Placement, Snapshot
from scheduler.core.fair_queue import FairView
from scheduler.core.fair_reclaim import reclaim
from scheduler.core.placement import FreeCapacity, per_unit
from scheduler.core.queue_order import considered_order, queues
from scheduler.core.policies.starvation import NO_NODES, StarvationGuard, free_outside
from scheduler.core.reservation import Reservation, capacity_units

DEFAULT_STARVATION_THRESHOLD = 6 * 3600.0
"""Seconds the oldest BE job may wait before it gets a reservation. Six hours:
far beyond the typical wait of a job that fits (minutes), short next to the
multi-day waits large jobs suffer without it on a busy cluster."""

DEFAULT_RECLAIM_MIN_RUNTIME = 1800.0
"""Seconds a BE job runs in its attempt before fair-share reclaim may preempt
it: half an hour, so a job restored from its checkpoint makes progress before
it can be stopped again, and short next to the hours a BE job runs. Measured
against 600 and 3600 s (docs/results.md, fair share, second pass): the best
attainment under a flood of the three, with fewer reclaims than 600 s."""

RECLAIM_MAX_PREEMPTIONS = 5
"""A job preempted this often is no longer taken by reclaim, whatever the policy's
own ``max_preemptions`` (which bounds preemption for TE jobs). Reclaim takes back
GPUs a tenant borrowed, and ``reclaim_min_runtime`` already spaces its preemptions
of one job; 5 against 2 or 3, measured (docs/results.md, fair share, third pass)."""

_REASONS = {r.value: r for r in Reason} | {r.name: r for r in Reason}


def hold_reason(job: PendingJob) -> Reason:
    """The snapshot's ``hold_reason`` as a Reason; raises ``ValueError`` naming
    the job and the field when it is not one."""
    raw = job.hold_reason
    if isinstance(raw, Reason):
        return raw
    try:
        return _REASONS[raw]  # type: ignore[index]
    except KeyError:
        raise ValueError(
            f"pending job {job.spec.id}: hold_reason {raw!r} is not a known reason ({', '.join(r.value for r in Reason)})"
        ) from None


def describe_placement(placement: Placement) -> str:
    if len(placement.parts) == 1:  # the usual placement, thousands in a large cycle: no generator and join
        ((n, g),) = placement.parts
        return f"{n} ({g} GPU{'s' if g != 1 else ''})"
    return ", ".join(f"{n} ({g} GPU{'s' if g != 1 else ''})" for n, g in placement.parts)


def gpus_text(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def duration_text(seconds: float) -> str:
    if seconds == math.inf:
        return "an unknown time"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def check_non_negative(name: str, value: float | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


class Cycle:
    """Working state of one ``decide`` call: the free-capacity copy, the
    decisions so far and a few caches. Never outlives the call."""

    __slots__ = (
        "snapshot", "now", "cap", "out", "explain", "te_queue", "planner", "no_plan", "claimants",
        "_msg", "_msg_version", "_capacity",
    )

    def __init__(self, snapshot: Snapshot, now: float, explain: bool) -> None:
        self.snapshot = snapshot
        self.now = now
        self.cap = FreeCapacity.of(snapshot.nodes, snapshot.running, snapshot.free)
        self.out: list[Decision] = []
        self.explain = explain
        # Preemption planning state, built only when a TE job needs it.
        self.te_queue: Sequence[PendingJob] = ()
        self.planner: object | None = None
        self.no_plan: set[tuple[int, float, float]] = set()
        self.claimants: set[str | None] = set()
        self._msg: dict[tuple[int, float, float], str] = {}
        self._msg_version = -1
        self._capacity: dict[tuple[float, float], int] = {}

    def start(self, job: PendingJob, placement: Placement) -> None:
        self.cap.take(job.spec, placement)
        self.out.append(Start(job.spec.id, placement, Reason.SCHEDULED, f"started on {describe_placement(placement)}"))

    def pend(self, job: PendingJob, reason: Reason, message: str, expected_at: float | None = None) -> None:
        self.out.append(Pend(job.spec.id, reason, message, expected_at))

    def pend_hold(self, job: PendingJob) -> None:
        reason = hold_reason(job)
        self.out.append(Pend(job.spec.id, reason, job.hold_message or f"held by the scheduler: {reason.value}"))

    def cluster_units(self, job: PendingJob, unit: tuple[float, float] | None = None) -> int:
        """Units of the job's shape (its ``per_unit``, given or not) the whole (empty) cluster holds."""
        shape = unit if unit is not None else per_unit(job.spec)
        units = self._capacity.get(shape)
        if units is None:
            units = sum(capacity_units(n, *shape) for n in self.snapshot.nodes)
            self._capacity[shape] = units
        return units

    def can_ever_fit(self, job: PendingJob, unit: tuple[float, float] | None = None) -> bool:
        return job.spec.num_gpus <= self.cluster_units(job, unit)

    def resources_message(self, job: PendingJob) -> str:
        """Why a job does not fit, in words; cached per job shape while the
        free capacity is unchanged (long queues repeat few shapes)."""
        spec = job.spec
        if self._msg_version != self.cap.version:
            self._msg.clear()
            self._msg_version = self.cap.version
        key = (spec.num_gpus, spec.num_cpus, spec.mem_gb)
        msg = self._msg.get(key)
        if msg is None:
            msg = self._resources_message(job)
            self._msg[key] = msg
        return msg

    def _resources_message(self, job: PendingJob) -> str:
        spec = job.spec
        want = gpus_text(spec.num_gpus)
        extra = []
        if spec.num_cpus:
            extra.append(f"{spec.num_cpus:g} CPUs")
        if spec.mem_gb:
            extra.append(f"{spec.mem_gb:g} GB memory")
        if extra:
            want += " with " + " and ".join(extra)
        if not self.can_ever_fit(job):
            return f"needs {want}: more than the whole cluster can hold"
        cap = self.cap
        if cap.total_gpus <= 0:
            return f"needs {want}; no GPU is free"
        return f"needs {want}; {gpus_text(cap.total_gpus)} free in the cluster, at most {cap.max_gpus} on one node"


class QueuePolicy:
    """Base of every policy: the shared BE queue discipline over one queue of
    all pending jobs (``fifo``), or TE first then BE (subclasses).

    Parameters (keyword only):

    ``starvation_threshold``: seconds (default 6 h) after which the oldest
    eligible pending job gets a reservation; ``None`` disables the rule.
    ``explain``: emit a ``Pend`` for every job not started (default True).
    ``reclaim_min_runtime``: with fair share on (``Snapshot.tenants``), seconds
    a BE job of a borrowing tenant must have run in its attempt before it may
    be preempted to give GPUs back (default 600); ``None``: no reclaim.
    """

    name = "fifo"
    te_first = False

    def __init__(self, *, starvation_threshold: float | None = DEFAULT_STARVATION_THRESHOLD, explain: bool = True,
                 reclaim_min_runtime: float | None = DEFAULT_RECLAIM_MIN_RUNTIME) -> None:
        check_non_negative("starvation_threshold", starvation_threshold, allow_none=True)
        check_non_negative("reclaim_min_runtime", reclaim_min_runtime, allow_none=True)
        self.starvation_threshold = starvation_threshold
        self.explain = bool(explain)
        self.reclaim_min_runtime = None if reclaim_min_runtime is None else float(reclaim_min_runtime)

    # --- the one entry point ------------------------------------------------

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        cyc = Cycle(snapshot, now, self.explain)
        pending = snapshot.pending
        te, be, fair = queues(snapshot, self.te_queue(snapshot))
        skip = {p.spec.id for p in te} if te else None
        cyc.te_queue = te
        guard = self.starving(cyc, pending, skip, fair, be)
        if te:
            self.te_pass(cyc, te, guard)
        self.be_pass(cyc, be, skip, guard)
        if fair is not None and self.reclaim_min_runtime is not None:
            reclaim(cyc, fair, be, skip, self.reclaim_min_runtime, RECLAIM_MAX_PREEMPTIONS)
        if fair is not None and fair.te_over and cyc.explain:
            fair.tell_te_over(cyc.out)
        return cyc.out

    def queue_order(self, snapshot: Snapshot, now: float) -> list[PendingJob]:
        """Every pending job in the order ``decide`` considers them: the TE
        queue, then the BE queue (``queue_order.considered_order``)."""
        return considered_order(snapshot, self.te_queue(snapshot))

    def te_queue(self, snapshot: Snapshot) -> list[PendingJob]:
        """The jobs served ahead of the BE queue, in arrival order; the BE
        queue is every other pending job. None here: fifo ignores job class."""
        return []

    # --- anti-starvation ------------------------------------------------------

    def starving(self, cyc: Cycle, pending: Sequence[PendingJob], skip: set[str] | None,
                 fair: FairView | None = None, be: Sequence[PendingJob] = ()) -> StarvationGuard | None:
        """A guard for the jobs the cycle may reserve nodes for: with fair share
        on, each tenant's first job of the fair order ``be`` that keeps its tenant
        within its entitlement or brings it closer (``FairView.heads_due``); when
        there is none, the oldest eligible job of the BE queue once it has waited
        past the threshold, whatever its priority (arrival order). Reservations
        are computed only if needed."""
        if fair is not None:
            guard: StarvationGuard | None = None
            for head in fair.heads_due(be, skip):
                t = head.spec.tenant
                why = (f"fair share: project {t or '(none)'} holds {fair.alloc.get(t, 0):g} GPUs, "
                       f"below its entitlement of {fair.entitled[t]:.3g}")
                if guard is None:
                    guard = StarvationGuard(cyc, head, why)
                else:
                    guard.add(head, why)
            if guard is not None:
                return guard
        if self.starvation_threshold is None:
            return None
        for job in pending:
            if job.hold_reason is not None or (skip is not None and job.spec.id in skip):
                continue
            if cyc.now - job.spec.submit_time <= self.starvation_threshold:
                return None
            return StarvationGuard(cyc, job)
        return None

    # --- TE queue (subclasses) -----------------------------------------------

    def te_pass(self, cyc: Cycle, queue: Sequence[PendingJob], guard: "StarvationGuard | None") -> None:
        """TE jobs in arrival order, non-blocking, ahead of every BE job. They
        may use free GPUs on reserved nodes: TE jobs are short and
        time-limited, and their latency is the point of the product."""
        cap = cyc.cap
        for job in queue:
            if job.hold_reason is not None:
                if cyc.explain:
                    cyc.pend_hold(job)
                continue
            placement = cap.place(job.spec)
            if placement is not None:
                cyc.start(job, placement)
            else:
                self.te_no_fit(cyc, job, guard)

    def te_no_fit(self, cyc: Cycle, job: PendingJob, guard: "StarvationGuard | None") -> None:
        if cyc.explain:
            cyc.pend(job, Reason.RESOURCES, cyc.resources_message(job))

    # --- BE queue ------------------------------------------------------------

    def be_pass(
        self, cyc: Cycle, queue: Sequence[PendingJob], skip: set[str] | None, guard: "StarvationGuard | None"
    ) -> None:
        """The shared discipline over ``queue`` minus the ``skip`` ids.

        ``usable`` (free GPUs outside reserved nodes) bounds what any job can
        get, so a job larger than it is passed over without a placement
        search, and once it is 0 nothing behind can start.
        """
        cap = cyc.cap
        explain = cyc.explain
        blocked = NO_NODES
        reservations: list[Reservation] = []
        starving_ids: Container[str] = guard.ids if guard is not None else ()
        usable = cap.total_gpus
        if usable <= 0 and not explain:
            return
        for i, job in enumerate(queue):
            spec = job.spec
            if skip is not None and spec.id in skip:
                continue
            if job.hold_reason is not None:
                if explain:
                    cyc.pend_hold(job)
                continue
            if spec.id in starving_ids:
                placement = cap.place(spec, blocked)
                if placement is not None:
                    cyc.start(job, placement)
                else:
                    reservation = guard.reservation(spec.id)  # type: ignore[union-attr]
                    if reservation is not None:
                        reservations.append(reservation)
                        blocked = blocked | reservation.nodes
                    if explain:
                        msg = (self._reserved_for_message(reservation, guard.why_of(spec.id))  # type: ignore[union-attr]
                               if reservation else cyc.resources_message(job))
                        cyc.pend(job, Reason.RESOURCES, msg)
                usable = free_outside(cap, blocked) if blocked else cap.total_gpus
            elif spec.num_gpus <= usable and (placement := cap.place(spec, blocked)) is not None:
                cyc.start(job, placement)
                usable = free_outside(cap, blocked) if blocked else cap.total_gpus
            elif explain:
                if blocked and cap.place(spec) is not None:
                    cyc.pend(job, Reason.RESERVED, self._blocked_message(reservations))
                else:
                    cyc.pend(job, Reason.RESOURCES, cyc.resources_message(job))
            if usable <= 0:
                # Nothing else can start in this cycle.
                if explain:
                    self._pend_rest(cyc, queue, i + 1, skip, reservations, guard)
                return

    def _pend_rest(
        self, cyc: Cycle, queue: Sequence[PendingJob], first: int, skip: set[str] | None,
        reservations: Sequence[Reservation], guard: StarvationGuard | None = None,
    ) -> None:
        """Every job of ``queue`` from ``first`` on stays pending. Nothing
        starts any more in this cycle, so free capacity is fixed: messages are
        built once per job shape (once for the reservation), which matters
        when thousands of jobs wait."""
        out = cyc.out
        place = cyc.cap.place
        resources, reserved = Reason.RESOURCES, Reason.RESERVED
        blocked = self._blocked_message(reservations) if reservations else ""
        # (reason, message) per shape: whether a job would fit on the reserved
        # nodes depends only on its shape, unless it excludes nodes or has a plan.
        verdicts: dict[tuple[int, float, float], tuple[Reason, str]] = {}
        append, skip_ids = out.append, skip if skip is not None else NO_NODES
        for job in islice(queue, first, None):  # tens of thousands of jobs: the loop is kept lean
            spec = job.spec
            if spec.id in skip_ids:
                continue
            if job.hold_reason is not None:
                cyc.pend_hold(job)
                continue
            if guard is not None and spec.id in guard.ids:  # still told where it will start
                r = guard.reservation(spec.id)
                append(Pend(spec.id, resources, self._reserved_for_message(r, guard.why_of(spec.id))
                            if r is not None else cyc.resources_message(job)))
                continue
            own = spec.excluded_nodes or spec.plan
            shape = (spec.num_gpus, spec.num_cpus, spec.mem_gb)
            verdict = None if own else verdicts.get(shape)
            if verdict is None:
                if reservations and place(spec) is not None:
                    verdict = (reserved, blocked)
                else:
                    verdict = (resources, cyc.resources_message(job))
                if not own:
                    verdicts[shape] = verdict
            append(Pend(spec.id, verdict[0], verdict[1]))

    # Neither message says how long a job has waited: a text that changes with the clock is
    # rewritten to every such job's row, every cycle or minute, while nothing else changed.

    def _reserved_for_message(self, r: Reservation, why: str | None = None) -> str:
        nodes = ", ".join(sorted(r.nodes))
        if why is None:
            why = f"waited past the {duration_text(self.starvation_threshold or 0.0)} starvation threshold"
        return f"{why}: {nodes} reserved for it; no other job of its queue starts there until it does"

    @staticmethod
    def _blocked_message(rs: Sequence[Reservation]) -> str:
        """Why a job that would fit only on reserved nodes waits."""
        held = "; ".join(f"{', '.join(sorted(r.nodes))}, reserved for job {r.job_id}" for r in rs)
        return f"would fit only on {held}"
