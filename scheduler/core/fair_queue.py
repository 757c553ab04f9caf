"""Fair share inside one ``decide`` call: queue order, the TE bound, reclaim.

Active when the snapshot carries ``tenants`` (``scheduler.core.fairshare``);
without it nothing here runs and every policy decides as before.

* **Order.** Jobs that keep their tenant within its entitlement (max-min
  fair part of the cluster given present demand and shares) come first, by
  fair-share factor (Slurm classic ``2^(-U/S)`` on decayed usage, higher
  first); then the jobs beyond, interleaved by the share their tenant would
  reach (``FairView.order``). Within a tenant: priority (higher first), then
  the user's decayed usage (less first), then arrival.
* **TE bound.** TE jobs keep their privilege (ahead of BE, preemption) only
  while their tenant's TE GPUs (running plus started this cycle) stay within
  its entitlement; the rest queue as BE in fair order. A flood of TE jobs
  from one tenant cannot take the cluster.
* **Reclaim.** A job of a tenant below its entitlement that would stay within
  it, and that does not fit, preempts BE jobs of *borrowing* tenants (holding
  more than their entitlement) that have run at least ``min_runtime`` in
  their attempt and were preempted fewer than ``max_preemptions`` times,
  through the shared victim planner (``scheduler.core.victim_planner``), cheapest to
  resume first, never taking a tenant below its own entitlement. Resources already vacating for the job are counted first, so
  it never preempts twice for the same need.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from scheduler.core.decisions import Pend, Preempt, Reason
from scheduler.core.fairshare import DEFAULT_SHARE, TenantUsage, factors, water_fill
from scheduler.core.model import JobClass, PendingJob, Snapshot
from scheduler.core.placement import per_unit
from scheduler.core.victim_choosers import NodeMemo, prefix_cover
from scheduler.core.victim_planner import Planner
from scheduler.core.victims import Candidate, Need, HostView, RunningIndex

_EPS = 1e-9


class FairView:
    """The tenants' standing at the start of one cycle."""

    __slots__ = ("tenants", "factor", "alloc", "entitled", "te_alloc")

    def __init__(self, snapshot: Snapshot, tenants: Mapping[str, TenantUsage]) -> None:
        known = dict(tenants)
        alloc: dict[str, float] = {}
        demand: dict[str, float] = {}
        te_alloc: dict[str, float] = {}
        for r in snapshot.running:
            t, g = r.spec.tenant, r.spec.num_gpus
            alloc[t] = alloc.get(t, 0.0) + g
            if not r.preempting:
                demand[t] = demand.get(t, 0.0) + g
                if r.spec.job_class is JobClass.TE:
                    te_alloc[t] = te_alloc.get(t, 0.0) + g
        for p in snapshot.pending:
            t = p.spec.tenant
            demand[t] = demand.get(t, 0.0) + (p.spec.num_gpus if p.hold_reason is None else 0.0)
        for t in set(demand) | set(alloc):
            if t not in known:
                known[t] = TenantUsage(DEFAULT_SHARE)
        total = sum(n.gpus for n in snapshot.nodes)
        self.tenants = known
        self.factor = factors(known)
        self.alloc = alloc
        self.entitled = water_fill(total, {t: demand.get(t, 0.0) for t in known}, {t: u.share for t, u in known.items()})
        self.te_alloc = te_alloc

    def below(self, tenant: str, extra: float = 0.0) -> bool:
        """True when the tenant, holding ``extra`` more GPUs, stays within its entitlement."""
        return self.alloc.get(tenant, 0.0) + extra <= self.entitled.get(tenant, 0.0) + _EPS

    def order(self, jobs: Sequence[PendingJob]) -> list[PendingJob]:
        """``jobs`` (arrival order) in fair order (module doc).

        Each tenant's jobs are first put in its own order (priority, user
        usage, arrival); walking that order, a job whose GPUs, added to what
        the tenant holds and to the jobs before it, stay within the
        entitlement is *within*, the rest *beyond*. Within jobs come first,
        by fair-share factor; beyond jobs follow, interleaved by the share
        their tenant would reach with them (GPUs over share, lowest first),
        so idle GPUs are lent evenly rather than to one tenant."""
        factor, tenants, entitled = self.factor, self.tenants, self.entitled
        own: dict[str, list[PendingJob]] = {}
        for p in jobs:
            own.setdefault(p.spec.tenant, []).append(p)
        keyed = []
        for t, queue in own.items():
            users = tenants[t].users
            if len(queue) > 1:
                queue.sort(key=lambda p: (-p.spec.priority, users.get(p.spec.user, 0.0)))
            held = self.alloc.get(t, 0.0)
            limit = entitled.get(t, 0.0) + _EPS
            for i, p in enumerate(queue):
                held += p.spec.num_gpus
                if held <= limit:
                    keyed.append(((0, -factor[t], t, i), p))
                else:
                    keyed.append(((1, -factor[t], t, i), p))
        keyed.sort(key=lambda kp: kp[0])
        return [p for _, p in keyed]

    def bound_te(self, te: Sequence[PendingJob]) -> tuple[list[PendingJob], list[PendingJob]]:
        """``(kept, over)``: TE jobs within their tenant's entitlement, in
        order, and those beyond it (they queue as BE this cycle)."""
        used = dict(self.te_alloc)
        kept: list[PendingJob] = []
        over: list[PendingJob] = []
        for job in te:
            t, g = job.spec.tenant, job.spec.num_gpus
            if job.hold_reason is not None:
                kept.append(job)
            elif used.get(t, 0.0) + g <= self.entitled.get(t, 0.0) + _EPS:
                used[t] = used.get(t, 0.0) + g
                kept.append(job)
            else:
                over.append(job)
        return kept, over


class ReclaimIndex(RunningIndex):
    """Victim candidates for reclaim: BE jobs of borrowing tenants whose
    preemption leaves the tenant at or above its entitlement (``excess``:
    GPUs held beyond it), running at least ``min_runtime`` in this attempt,
    preempted fewer than the limit, not already stopping. A tenant is never
    pushed below its part, so it never has cause to reclaim in turn: no
    cascade of preemptions."""

    def __init__(self, snapshot: Snapshot, now: float, max_preemptions: int, min_runtime: float,
                 excess: dict[str, float]) -> None:
        super().__init__(snapshot.running, now, float("inf"), max_preemptions)
        self._min_runtime = min_runtime
        self._excess = excess

    @property
    def by_node(self) -> dict[str, list[Candidate]]:
        if self._by_node is None:
            by_node: dict[str, list[Candidate]] = {}
            for r in self._running:
                spec = r.spec
                if (r.preempting or r.reconfiguring or spec.job_class is not JobClass.BE
                        or r.preemptions >= self._max_preemptions
                        or spec.num_gpus > self._excess.get(spec.tenant, 0.0) + _EPS
                        or self._now - r.attempt_start < self._min_runtime):
                    continue
                g = spec.num_gpus
                parts = {n: (k, spec.num_cpus * k / g, spec.mem_gb * k / g) for n, k in r.placement.parts}
                c = Candidate(r, spec.id, g, spec.grace_period, r.preemptions, r.attempt_start, False, parts)
                for name in parts:
                    by_node.setdefault(name, []).append(c)
            self._by_node = by_node
        return self._by_node


def resume_cost(v: Candidate) -> tuple[float, int, float, str]:
    """Cheapest to resume first: GPU-seconds held while checkpointing, then
    fewer earlier preemptions, then the latest started, then id."""
    return (v.gpus * v.grace, v.preemptions, -v.start, v.id)


class ResumeCostChooser:
    """Victims in ``resume_cost`` order until the job fits; across nodes the
    set of least total cost, then fewest victims, then node name."""

    def single(self, need: Need, views: Sequence[HostView], memo: NodeMemo):
        best = None
        best_key = None
        for view in views:
            victims = prefix_cover(need, view, sorted(view.cands, key=resume_cost))
            if victims is None:
                continue
            k = (sum(v.gpus * v.grace for v in victims), len(victims), view.name)
            if best_key is None or k < best_key:
                best, best_key = (view, victims, None), k
        return best

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        return sorted(cands, key=resume_cost)


def reclaim(cyc, view: FairView, queue: Sequence[PendingJob], skip: set[str] | None,
            min_runtime: float, max_preemptions: int) -> None:
    """The reclaim pass (module doc), after the BE pass of ``cyc`` over ``queue``."""
    started = {d.job_id for d in cyc.out if d.__class__.__name__ == "Start"}
    wanting = [
        p for p in queue
        if p.hold_reason is None and p.spec.id not in started and (skip is None or p.spec.id not in skip)
        and view.below(p.spec.tenant, p.spec.num_gpus) and cyc.can_ever_fit(p)
    ]
    if not wanting or not _excess(view):
        return
    waiting = {p.spec.id for p in wanting} | {p.spec.id for p in cyc.te_queue if p.hold_reason is None}
    planner = _planner(cyc, view, waiting, min_runtime, max_preemptions)
    failed: set[tuple[int, float, float]] = set()
    pends: dict[str, int] | None = None
    nodes_of: dict[str, set[str]] | None = None
    for job in wanting:
        spec = job.spec
        shape = (spec.num_gpus, *per_unit(spec))
        if shape in failed or not view.below(spec.tenant, spec.num_gpus):
            continue
        plan = planner.plan(job, cyc.now)
        if plan is None or not _keeps_entitlements(view, plan.victims):
            failed.add(shape)
            continue
        planner.commit(job, plan)
        view.alloc[spec.tenant] = view.alloc.get(spec.tenant, 0.0) + spec.num_gpus
        for v in plan.victims:
            t = v.job.spec.tenant
            view.alloc[t] -= v.gpus
            cyc.out.append(Preempt(v.id, spec.id, Reason.PREEMPTED_FOR_PRIORITY,
                                   f"fair share: tenant {t or '(none)'} holds more than its entitlement; "
                                   f"preempted for job {spec.id} of tenant {spec.tenant or '(none)'}"))
        if cyc.explain:
            if pends is None:
                pends = {d.job_id: i for i, d in enumerate(cyc.out) if d.__class__ is Pend}
            _replace_pend(cyc, pends, Pend(spec.id, Reason.WAITING_FOR_PREEMPTION,
                                           f"fair share: reclaiming GPUs from borrowing tenants on "
                                           f"{', '.join(sorted(plan.parts))}"))
        if plan.victims:  # the victims' tenants borrow less now: fewer candidates
            excess = _excess(view)
            if not excess:
                return
            if nodes_of is None:
                nodes_of = _nodes_by_tenant(planner)
            # Only the victims' tenants borrow less now (the job's tenant stays within its part).
            names = set().union(*(nodes_of.get(v.job.spec.tenant, ()) for v in plan.victims))
            planner.narrow(lambda c: c.gpus <= excess.get(c.job.spec.tenant, 0.0) + _EPS, names)


def _nodes_by_tenant(planner: Planner) -> dict[str, set[str]]:
    """The nodes on which each tenant has reclaim candidates."""
    out: dict[str, set[str]] = {}
    for name, cands in planner.index.by_node.items():
        for c in cands:
            out.setdefault(c.job.spec.tenant, set()).add(name)
    return out


def _keeps_entitlements(view: FairView, victims: Sequence[Candidate]) -> bool:
    """True when no victim's tenant drops below its entitlement with all of them gone."""
    taken: dict[str, float] = {}
    for v in victims:
        t = v.job.spec.tenant
        taken[t] = taken.get(t, 0.0) + v.gpus
    return all(view.alloc.get(t, 0.0) - g >= view.entitled.get(t, 0.0) - _EPS for t, g in taken.items())


def _excess(view: FairView) -> dict[str, float]:
    """GPUs each borrowing tenant holds beyond its entitlement."""
    return {t: held - view.entitled.get(t, 0.0) for t, held in view.alloc.items() if not view.below(t)}


def _planner(cyc, view: FairView, waiting: set[str], min_runtime: float, max_preemptions: int) -> Planner:
    """A planner over the borrowing tenants' BE jobs; victims and vacating
    jobs already spoken for in this cycle (by TE jobs) stay spoken for. One
    planner serves the whole pass: after each reclaim it withdraws the
    candidates whose tenant no longer borrows enough (``Planner.narrow``)
    and keeps its views of every other node."""
    index = ReclaimIndex(cyc.snapshot, cyc.now, max_preemptions, min_runtime, _excess(view))
    if cyc.planner is not None:
        index.chosen |= cyc.planner.index.chosen
        index.consumed |= cyc.planner.index.consumed
    return Planner(cyc.cap, index, waiting, ResumeCostChooser())


def _replace_pend(cyc, at: dict[str, int], pend: Pend) -> None:
    """Put ``pend`` in place of the job's earlier Pend (``at``: its index in ``cyc.out``), else append it."""
    out = cyc.out
    i = at.get(pend.job_id)
    if i is not None:
        out[i] = pend
    else:
        at[pend.job_id] = len(out)
        out.append(pend)
