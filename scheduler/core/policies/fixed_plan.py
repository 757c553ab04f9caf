"""Baselines that keep every job's plan and GPU count: ``fifo-fixed``,
``tiresias`` and ``synergy`` (docs/rubick.md).

They differ only in the order jobs are served, whether running jobs are
preempted, and how many CPUs a job gets. Placement is plan-aware: a job
whose plan splits layers over ``tp`` GPUs (3D plans) is placed in blocks of
``tp`` GPUs on one node each, because the plan cannot run with a tensor
group over fewer GPUs than that on a node; other jobs follow the shared rule
(one node when possible, else the fewest nodes).

Common queue discipline: non-blocking (a job that does not fit lets later
jobs start); a job with a ``hold_reason`` stays pending with it; a job that
has waited longer than ``starvation_threshold`` and does not fit stops every
job behind it from starting until it does.
"""

from __future__ import annotations

import math
from typing import Sequence

from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Start
from scheduler.core.model import PendingJob, RunningJob, Snapshot
from scheduler.core.policies.base import DEFAULT_STARVATION_THRESHOLD, check_non_negative, describe_placement, gpus_text
from scheduler.core.placement import plan_block
from scheduler.core.policies.reconfig import Pool, cpus_per_gpu, mem_per_gpu, placement_of, shape_of
from scheduler.core.queue_order import by_priority


PLACEMENTS = ("pack", "most-free")
"""Where a plan-keeping baseline puts a job (``FixedPlanPolicy.placement``):
``pack``, one node when possible (the fullest that holds it), else the fewest
nodes; ``most-free``, greedily from the nodes with the most free GPUs (the
Pollux study's Tiresias), which spreads a job whenever no node has room."""


class FixedPlanPolicy:
    """Base of the plan-keeping baselines (see the module doc)."""

    name = "fixed-plan"

    def __init__(self, *, starvation_threshold: float | None = DEFAULT_STARVATION_THRESHOLD,
                 order: str = "arrival", placement: str = "pack", explain: bool = True) -> None:
        check_non_negative("starvation_threshold", starvation_threshold, allow_none=True)
        if order not in ("arrival", "work"):
            raise ValueError(f"order must be 'arrival' or 'work', got {order!r}")
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.placement = placement
        self.starvation_threshold = starvation_threshold
        self.order_by = order
        self.explain = bool(explain)

    # --- hooks -----------------------------------------------------------------

    def order(self, pending: Sequence[PendingJob], now: float) -> list[PendingJob]:
        """Pending jobs in the order they are served: higher ``priority``
        first, then arrival, or (``order="work"``, a diagnostic) the least
        expected work first: remaining steps x the request's iteration time x
        GPUs, from the job's throughput function (jobs without one last); jobs
        past the starvation threshold first either way."""
        if self.order_by == "arrival":
            return list(by_priority(pending, uniform=False))

        def key(p: PendingJob) -> tuple:
            spec = p.spec
            starving = self.starvation_threshold is not None and now - spec.submit_time > self.starvation_threshold
            work = math.inf
            if spec.throughput is not None and spec.steps:
                work = max(spec.steps - p.steps_done, 0.0) * spec.throughput.reference() * spec.num_gpus
            return (not starving, -spec.priority, work, spec.submit_time, spec.id)

        return sorted(pending, key=key)

    def queue_order(self, snapshot: Snapshot, now: float) -> list[PendingJob]:
        """Every pending job in the order ``decide`` serves them."""
        return self.order(snapshot.pending, now)

    def cpus(self, pool: Pool, job: PendingJob, parts: dict[str, int]) -> float | None:
        """CPUs for the job on ``parts`` (None: its request)."""
        return None

    # --- the cycle ---------------------------------------------------------------

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        pool = Pool.of(snapshot.nodes, snapshot.running, snapshot.free)
        out: list[Decision] = []
        self.serve(pool, self.queue_order(snapshot, now), now, out)
        return out

    def serve(self, pool: Pool, queue: Sequence[PendingJob], now: float, out: list[Decision],
              claims: frozenset[str] = frozenset()) -> None:
        """Start what fits in queue order. A job in ``claims`` (running jobs
        are being preempted for it) that does not fit yet blocks the jobs
        behind it, so nobody else takes what is freed for it."""
        blocked: PendingJob | None = None
        for job in queue:
            spec = job.spec
            if job.hold_reason is not None:
                if self.explain:
                    out.append(Pend(spec.id, _reason(job.hold_reason), job.hold_message or str(job.hold_reason)))
                continue
            if blocked is not None:
                if self.explain:
                    out.append(Pend(spec.id, Reason.PRIORITY,
                                    f"behind job {blocked.spec.id}, which has waited past the starvation threshold"))
                continue
            parts = self.place(pool, job)
            if parts is not None:
                out.append(self.start(pool, job, parts))
                continue
            if spec.id in claims or (
                self.starvation_threshold is not None and now - spec.submit_time > self.starvation_threshold
            ):
                blocked = job
            if self.explain:
                out.append(Pend(spec.id, Reason.RESOURCES,
                                f"needs {gpus_text(spec.num_gpus)} (plan {spec.plan or 'as submitted'}); "
                                f"{gpus_text(pool.gpus)} free"))

    def place(self, pool: Pool, job: PendingJob) -> dict[str, int] | None:
        spec = job.spec
        block = plan_block(spec.plan)
        if self.placement == "most-free" and block <= 1:
            return pool.place_most_free(spec.num_gpus, cpus_per_gpu(spec), mem_per_gpu(spec))
        return pool.place_blocks(spec.num_gpus, block, cpus_per_gpu(spec), mem_per_gpu(spec))

    def start(self, pool: Pool, job: PendingJob, parts: dict[str, int]) -> Start:
        spec = job.spec
        cpus = self.cpus(pool, job, parts)
        cpg = cpus_per_gpu(spec) if cpus is None else cpus / spec.num_gpus
        pool.take(parts, cpg, mem_per_gpu(spec))
        where = placement_of(parts)
        return Start(spec.id, where, Reason.SCHEDULED, f"started on {describe_placement(where)}",
                     plan=spec.plan, cpus=cpus)


class FifoFixed(FixedPlanPolicy):
    """First in, first out with each job's own plan and GPUs (non-blocking)."""

    name = "fifo-fixed"


class Synergy(FixedPlanPolicy):
    """Synergy-like multi-resource allocation (Mohan et al., OSDI 2022) over
    FIFO: GPUs and plan as requested; CPUs either in proportion to GPUs
    (``mode="proportional"``: the node's CPUs per GPU) or *tuned*
    (``mode="tune"``, default): the fewest CPUs, among the request, the
    proportional share and everything free on the job's nodes, that reach
    the best iteration time the job's throughput function predicts there.
    A job without a throughput function gets its request."""

    name = "synergy"

    def __init__(self, *, mode: str = "tune", **params: object) -> None:
        if mode not in ("tune", "proportional"):
            raise ValueError(f"mode must be 'tune' or 'proportional', got {mode!r}")
        super().__init__(**params)  # type: ignore[arg-type]
        self.mode = mode
        self._node_ratio: float | None = None

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        ratios = {n.cpus / n.gpus for n in snapshot.nodes if n.cpus > 0 and n.gpus > 0}
        self._node_ratio = min(ratios) if ratios else None
        return super().decide(snapshot, now)

    def cpus(self, pool: Pool, job: PendingJob, parts: dict[str, int]) -> float | None:
        spec = job.spec
        g = spec.num_gpus
        fair = self._node_ratio * g if self._node_ratio else None
        room = min(pool.free[n][1] / k for n, k in parts.items()) * g  # inf: CPUs untracked
        if fair is not None:
            fair = min(fair, room)
        if self.mode == "proportional" or spec.throughput is None or not hasattr(spec.throughput, "time"):
            return fair if fair is not None and fair >= spec.num_cpus else None
        options = sorted({c for c in (spec.num_cpus, fair, room) if c is not None and math.isfinite(c) and c >= g})
        if not options:
            return None
        shape = shape_of(parts)
        times = [(spec.throughput.time(spec.plan, shape, c), c) for c in options]
        times = [(t, c) for t, c in times if t is not None]
        if not times:
            return None
        best = min(t for t, _ in times)
        chosen = min(c for t, c in times if t <= best * 1.01)
        return None if chosen == spec.num_cpus else chosen


WITHIN_QUEUE = ("running-first", "arrival")
"""Orders within a Tiresias queue (``Tiresias.within_queue``)."""


class Tiresias(FixedPlanPolicy):
    """Tiresias-like 2D least-attained-service (Gu et al., NSDI 2019).

    A job's attained service is GPUs x seconds it has run; ``thresholds``
    (GPU-seconds, default 1 and 10 GPU-hours) cut it into queues, served
    highest (least service) first, each in arrival order, skipping a job
    that does not fit (the paper's discretized 2D-LAS). A pending job may
    preempt running jobs of a strictly lower queue when that lets it start.
    Within a queue, waiting jobs of higher ``priority`` come first: attained
    service stays the first key, since it is the policy's point. With the
    default ``within_queue``, running jobs stay ahead of them, so a priority
    orders waiting jobs and preempts nobody of its queue.

    Starvation: the paper avoids it by promoting a job that has waited long
    relative to its service back to the highest queue (``PROMOTEKNOB``), a
    knob the Pollux study's Tiresias leaves off; there is no head-of-line
    blocking in either. ``starvation_threshold`` therefore defaults to None
    here. Set, it is the plan-keeping baselines' rule: a job past the
    threshold is served first and blocks every job behind it until it
    starts, and no job preempts meanwhile (or two starving jobs would
    preempt each other in turn). That rule is not Tiresias: on the Morphling
    ``workload-base`` it held the queue behind one large job for hours
    (mean JCT 1.45 h, worse than FIFO), while the same jobs arriving 1.3x
    faster crossed the threshold at other moments (0.31 h); without it,
    0.26 and 0.31 h.

    ``within_queue``: ``"running-first"`` (default) keeps a running job
    ahead of waiting jobs of its queue, so jobs of one queue never preempt
    each other; ``"arrival"`` orders a queue by arrival alone, running or
    not, as the Pollux study's Tiresias does (a waiting job that arrived
    earlier displaces a running one of its queue).
    """

    name = "tiresias"

    def __init__(self, *, thresholds: tuple[float, ...] | str = (3600.0, 36000.0),
                 starvation_threshold: float | None = None, within_queue: str = "running-first",
                 **params: object) -> None:
        if params.get("order", "arrival") != "arrival":
            raise ValueError("order: tiresias serves its queues by attained service, then arrival")
        super().__init__(starvation_threshold=starvation_threshold, **params)  # type: ignore[arg-type]
        if isinstance(thresholds, str):
            thresholds = tuple(float(x) for x in thresholds.split("/") if x)
        elif isinstance(thresholds, (int, float)):
            thresholds = (float(thresholds),)
        if any(not t > 0 for t in thresholds) or list(thresholds) != sorted(thresholds):
            raise ValueError(f"thresholds must be increasing positive GPU-seconds, got {thresholds!r}")
        self.thresholds = tuple(float(t) for t in thresholds)
        if within_queue not in WITHIN_QUEUE:
            raise ValueError(f"within_queue must be one of {', '.join(WITHIN_QUEUE)}, got {within_queue!r}")
        self.within_queue = within_queue

    def queue_of(self, gpus: int, progress: float) -> int:
        service = gpus * progress
        return sum(1 for t in self.thresholds if service >= t)

    def _priority(self, job: PendingJob | RunningJob, running: bool) -> tuple:
        spec = job.spec
        first = 0 if running or self.within_queue == "arrival" else 1
        return (self.queue_of(spec.num_gpus, job.progress), first, -spec.priority, spec.submit_time, spec.id)

    def _serve_key(self, job: PendingJob, now: float) -> tuple:
        """Queue order, except that a job past the starvation threshold comes
        first (it blocks the others until it starts, but preempts nobody)."""
        starving = self.starvation_threshold is not None and now - job.spec.submit_time > self.starvation_threshold
        return (not starving, *self._priority(job, False))

    def queue_order(self, snapshot: Snapshot, now: float) -> list[PendingJob]:
        """Every pending job in the order ``decide`` serves them (``_serve_key``)."""
        return sorted(snapshot.pending, key=lambda p: self._serve_key(p, now))

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        pool = Pool.of(snapshot.nodes, snapshot.running, snapshot.free)
        out: list[Decision] = []
        keep = [r for r in snapshot.running if not r.preempting and not r.reconfiguring]
        queue = self.queue_order(snapshot, now)
        starving = bool(queue) and not self._serve_key(queue[0], now)[0]
        victims, claims = ([], frozenset()) if starving else self._victims(snapshot, keep, now)
        for r in victims:
            out.append(Preempt(r.spec.id, None, Reason.PREEMPTED_FOR_PRIORITY,
                               f"attained service {r.spec.num_gpus * r.progress:.0f} GPU-s puts it in queue "
                               f"{self.queue_of(r.spec.num_gpus, r.progress)}, below a waiting job"))
        self.serve(pool, queue, now, out, claims)
        return out

    def _victims(self, snapshot: Snapshot, running: list[RunningJob],
                 now: float) -> tuple[list[RunningJob], frozenset[str]]:
        """Running jobs to preempt: in a what-if cluster holding only jobs that
        cannot be preempted, jobs take resources in priority order (running
        ones keeping their placement); running jobs left without theirs go,
        but only for a pending job of a strictly higher queue that then fits.
        Also returns the pending jobs the evictions are for."""
        if not snapshot.pending:
            return [], frozenset()
        held = [r for r in snapshot.running if r.preempting or r.reconfiguring]
        what_if = Pool.of(snapshot.nodes, held, None)
        jobs = [(self._priority(r, True), r, True) for r in running]
        jobs += [(self._priority(p, False), p, False) for p in snapshot.pending if p.hold_reason is None]
        jobs.sort(key=lambda x: x[0])
        # ``now_free``: the what-if cluster with every running job not yet
        # processed still in place, so a pending job displaces running ones
        # only when it fits nowhere else.
        now_free = Pool({n: tuple(v) for n, v in what_if.free.items()})
        for r in running:
            now_free.take(dict(r.placement.parts), cpus_per_gpu(r.spec), mem_per_gpu(r.spec))
        evicted: list[tuple[tuple, RunningJob]] = []
        claimants: list[str] = []
        for prio, job, is_running in jobs:
            spec = job.spec
            cpg, mpg = cpus_per_gpu(spec), mem_per_gpu(spec)
            if is_running:
                parts = dict(job.placement.parts)
                now_free.give(parts, cpg, mpg)
                if what_if.fits(parts, cpg, mpg):
                    what_if.take(parts, cpg, mpg)
                    now_free.take(parts, cpg, mpg)
                else:
                    evicted.append((prio, job))
            else:
                parts = self.place(now_free, job)  # type: ignore[arg-type]
                if parts is None:
                    parts = self.place(what_if, job)  # type: ignore[arg-type]
                    if parts is not None:
                        claimants.append(spec.id)
                if parts is not None:
                    what_if.take(parts, cpg, mpg)
                    now_free.take(parts, cpg, mpg)
        if not evicted:
            return [], frozenset()
        return [r for _, r in evicted], frozenset(claimants)


def _reason(raw: object) -> Reason:
    for r in Reason:
        if raw in (r, r.value, r.name):
            return r
    raise ValueError(f"hold_reason {raw!r} is not a known reason")


__all__ = ["FifoFixed", "FixedPlanPolicy", "Synergy", "Tiresias"]
