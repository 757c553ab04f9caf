"""Fair-share reclaim: a tenant well below its entitlement takes GPUs back.

Runs after the BE pass of a queue policy when fair share is on
(``scheduler.core.fair_queue``). Victims are always BE jobs of *borrowing*
tenants (holding more than their entitlement) that have run at least
``min_runtime`` in their attempt and were preempted fewer than
``max_preemptions`` times (reclaim's own limit, ``base.RECLAIM_MAX_PREEMPTIONS``),
chosen through the shared victim planner
(``scheduler.core.victim_planner``), cheapest to resume first. Resources
already vacating for a job are counted first, so it never preempts twice for
the same need.

* **Threshold.** Only a tenant holding at most ``fair_queue.RECLAIM_BELOW`` of its
  entitlement reclaims. Tenants near their part swap a few GPUs back and forth
  as demand shifts; each swap costs a checkpoint and uses up one of the
  victim's preemptions, and a job at its limit can never be reclaimed again
  when a tenant truly falls behind.
* **Within.** A job that keeps its tenant within its entitlement may take
  GPUs from borrowers as long as no borrower drops below its own entitlement:
  no tenant is pushed below its part, so none has cause to reclaim in turn.
* **Overshoot.** Jobs are indivisible: a tenant holding 20 of its 32 GPUs
  whose next job needs 16 would never start it under the rule above, though
  the start brings it closer to its part (36 is nearer 32 than 20 is). Such a
  job (holding plus half the job below the entitlement) may reclaim from
  borrowers down to, but not onto, the level its tenant had before (GPUs per
  unit of share). Every reclaim thus raises the lowest level among the
  tenants involved, so reclaims cannot cycle; one overshoot per cycle keeps
  the preemptions of a cycle few.
"""

from __future__ import annotations

from typing import Sequence

from scheduler.core.decisions import Pend, Preempt, Reason
from scheduler.core.fair_queue import EPS, FairView
from scheduler.core.model import JobClass, PendingJob, Snapshot
from scheduler.core.placement import per_unit
from scheduler.core.victim_choosers import NodeMemo, prefix_cover
from scheduler.core.victim_planner import Planner
from scheduler.core.victims import Candidate, HostView, Need, PreemptionPlan, RunningIndex


class ReclaimIndex(RunningIndex):
    """Victim candidates for reclaim: BE jobs of tenants with ``room`` for
    them (GPUs the tenant may give: beyond its entitlement, or for an
    overshoot beyond the reclaiming tenants' level), running at least
    ``min_runtime`` in this attempt, preempted fewer than the limit, not
    already stopping."""

    def __init__(self, snapshot: Snapshot, now: float, max_preemptions: int, min_runtime: float,
                 room: dict[str, float]) -> None:
        super().__init__(snapshot.running, now, float("inf"), max_preemptions)
        self._min_runtime = min_runtime
        self._room = room

    @property
    def by_node(self) -> dict[str, list[Candidate]]:
        if self._by_node is None:
            by_node: dict[str, list[Candidate]] = {}
            for r in self._running:
                spec = r.spec
                if (r.preempting or r.reconfiguring or spec.job_class is not JobClass.BE
                        or r.preemptions >= self._max_preemptions
                        or spec.num_gpus > self._room.get(spec.tenant, 0.0) + EPS
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
    set of least total cost, then fewest victims, then node name (``rank``).

    A ``BoundedChooser``: the planner keeps the nodes in a heap across the
    pass's jobs instead of scanning every node for each (at 5,000 nodes a
    pass reclaims for over a thousand jobs)."""

    def single(self, need: Need, views: Sequence[HostView], memo: NodeMemo):
        best = None
        best_key = None
        for view in views:
            found = self.best_on_node(need, view, memo)
            if found is None:
                continue
            k = self.rank(found[0], found[1], view.name)
            if best_key is None or k < best_key:
                best, best_key = (view, found[1], None), k
        return best

    def best_on_node(self, need: Need, view: HostView, memo: NodeMemo | None) -> tuple[float, list[Candidate]] | None:
        """``(cost, victims)``: the candidates in ``resume_cost`` order until the job fits, and the
        GPU-seconds they hold while checkpointing; None when they never fit. Kept in ``memo`` per
        node and job shape until the node changes: a pass plans for many jobs of few shapes."""
        if memo is None:
            return self._best_on_node(need, view)
        return memo.get(view, ("resume", need.shape), lambda: self._best_on_node(need, view))  # type: ignore[return-value]

    @staticmethod
    def _best_on_node(need: Need, view: HostView) -> tuple[float, list[Candidate]] | None:
        victims = prefix_cover(need, view, sorted(view.cands, key=resume_cost))
        return None if victims is None else (sum(v.gpus * v.grace for v in victims), victims)

    @staticmethod
    def rank(score: float, victims: Sequence[Candidate], name: str) -> tuple[float, int, str]:
        return (score, len(victims), name)

    @staticmethod
    def floor(view: HostView, now: float) -> tuple[float, int, str]:
        """No rank of the node is below it: a victim set holds at least one candidate (``prefix_cover``
        keeps the last one taken), so its cost is at least the least candidate's (adding costs, each
        >= 0, never decreases a float sum)."""
        return (min(v.gpus * v.grace for v in view.cands), 1, view.name)

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        return sorted(cands, key=resume_cost)


def reclaim(cyc, view: FairView, queue: Sequence[PendingJob], skip: set[str] | None,
            min_runtime: float, max_preemptions: int) -> None:
    """The reclaim pass (module doc), after the BE pass of ``cyc`` over ``queue``."""
    if not _excess(view):
        return
    # Only the jobs of tenants far below their part can reclaim, and no tenant joins them during the
    # pass (a within reclaim leaves its victims' tenants their entitlement; beneficiaries gain), so
    # the rest of the queue (under a flood, nearly all of it) is not looked at.
    deprived = {t for t in view.entitled if view.far_below(t)}
    if not deprived:
        return
    started = {d.job_id for d in cyc.out if d.__class__.__name__ == "Start"}
    eligible = [
        p for p in queue
        if p.spec.tenant in deprived and p.hold_reason is None and p.spec.id not in started
        and (skip is None or p.spec.id not in skip) and cyc.can_ever_fit(p)
    ]
    if not eligible:
        return
    within = [p for p in eligible if view.far_below(p.spec.tenant) and view.below(p.spec.tenant, p.spec.num_gpus)]
    state = _Pass(cyc)
    planner = _reclaim_within(cyc, view, within, state, min_runtime, max_preemptions) if within else None
    over = [p for p in eligible if p.spec.id not in state.served and view.overshoots_closer(p)]
    if over:
        _reclaim_overshoot(cyc, view, over, planner, state, min_runtime, max_preemptions)


class _Pass:
    """What one reclaim pass has done: the jobs it served, where their Pends are."""

    __slots__ = ("cyc", "served", "pends")

    def __init__(self, cyc) -> None:
        self.cyc = cyc
        self.served: set[str] = set()
        self.pends: dict[str, int] | None = None

    def commit(self, view: FairView, planner: Planner, job: PendingJob, plan: PreemptionPlan) -> None:
        """Take ``plan`` for ``job``: its victims' Preempts, its tenant's and theirs' holdings, its Pend."""
        cyc, spec = self.cyc, job.spec
        planner.commit(job, plan)
        self.served.add(spec.id)
        view.alloc[spec.tenant] = view.alloc.get(spec.tenant, 0.0) + spec.num_gpus
        for v in plan.victims:
            t = v.job.spec.tenant
            view.alloc[t] -= v.gpus
            cyc.out.append(Preempt(v.id, spec.id, Reason.PREEMPTED_FOR_PRIORITY,
                                   f"fair share: project {t or '(none)'} holds more than its entitlement; "
                                   f"preempted for job {spec.id} of project {spec.tenant or '(none)'}"))
        if cyc.explain:
            if self.pends is None:
                self.pends = {d.job_id: i for i, d in enumerate(cyc.out) if d.__class__ is Pend}
            _replace_pend(cyc, self.pends, Pend(spec.id, Reason.WAITING_FOR_PREEMPTION,
                                                f"fair share: reclaiming GPUs from borrowing tenants on "
                                                f"{', '.join(sorted(plan.parts))}", plan.until))


def _reclaim_within(cyc, view: FairView, wanting: Sequence[PendingJob], state: _Pass, min_runtime: float,
                    max_preemptions: int) -> Planner:
    """Reclaim for jobs within their tenant's entitlement (module doc); returns the planner used."""
    waiting = {p.spec.id for p in wanting} | {p.spec.id for p in cyc.te_queue if p.hold_reason is None}
    planner = _planner(cyc, _excess(view), waiting, min_runtime, max_preemptions, ())
    failed: set[tuple[int, float, float]] = set()
    nodes_of: dict[str, set[str]] | None = None
    largest: dict[str, float] = {}
    for job in wanting:
        spec = job.spec
        shape = (spec.num_gpus, *per_unit(spec))
        if shape in failed or not view.below(spec.tenant, spec.num_gpus):
            continue
        plan = planner.plan(job, cyc.now)
        if plan is None or not _keeps_entitlements(view, plan.victims):
            failed.add(shape)
            continue
        state.commit(view, planner, job, plan)
        if plan.victims:  # the victims' tenants borrow less now: fewer candidates
            excess = _excess(view)
            if not excess:
                return planner
            if nodes_of is None:
                nodes_of, largest = _nodes_by_tenant(planner)
            # Only the victims' tenants borrow less now (the job's tenant stays within its part), and
            # only those whose excess fell below their largest candidate can lose one.
            shrunk = {t for v in plan.victims
                      if excess.get(t := v.job.spec.tenant, 0.0) + EPS < largest.get(t, 0.0)}
            if shrunk:
                names = set().union(*(nodes_of.get(t, ()) for t in shrunk))
                planner.narrow(lambda c: c.gpus <= excess.get(c.job.spec.tenant, 0.0) + EPS, names)
                for t in shrunk:  # every candidate of theirs left holds at most their excess now
                    largest[t] = excess.get(t, 0.0)
    return planner


def _reclaim_overshoot(cyc, view: FairView, over: Sequence[PendingJob], within: Planner | None, state: _Pass,
                       min_runtime: float, max_preemptions: int) -> None:
    """At most one reclaim with victims for a job beyond its tenant's entitlement (module doc)."""
    low = min(view.level(p.spec.tenant) for p in over)
    # Borrowers may give down to the lowest level among the jobs' tenants; each plan is checked against its own.
    room = {t: held - view.tenants[t].share * low for t, held in view.alloc.items() if not view.below(t)}
    if not room:
        return
    waiting = {p.spec.id for p in over} | {p.spec.id for p in cyc.te_queue if p.hold_reason is None}
    planner = _planner(cyc, room, waiting, min_runtime, max_preemptions, (within,) if within is not None else ())
    failed: set[tuple[str, int, float, float]] = set()
    for job in over:
        spec = job.spec
        key = (spec.tenant, spec.num_gpus, *per_unit(spec))
        if key in failed or not view.overshoots_closer(job):
            continue
        plan = planner.plan(job, cyc.now)
        if plan is None or not _stays_above(view, plan.victims, view.level(spec.tenant)):
            failed.add(key)
            continue
        state.commit(view, planner, job, plan)
        if plan.victims:
            return
        failed.clear()  # vacating resources were counted: other plans may differ now


def _stays_above(view: FairView, victims: Sequence[Candidate], level: float) -> bool:
    """True when every victim's tenant, with all of them gone, stays above ``level`` (GPUs per share)."""
    return all(view.alloc.get(t, 0.0) - g > view.tenants[t].share * level + EPS for t, g in _taken(victims).items())


def _taken(victims: Sequence[Candidate]) -> dict[str, float]:
    """GPUs the victims hold, per tenant."""
    taken: dict[str, float] = {}
    for v in victims:
        t = v.job.spec.tenant
        taken[t] = taken.get(t, 0.0) + v.gpus
    return taken


def _nodes_by_tenant(planner: Planner) -> tuple[dict[str, set[str]], dict[str, float]]:
    """The nodes on which each tenant has reclaim candidates, and its largest candidate (GPUs)."""
    nodes: dict[str, set[str]] = {}
    largest: dict[str, float] = {}
    for name, cands in planner.index.by_node.items():
        for c in cands:
            t = c.job.spec.tenant
            nodes.setdefault(t, set()).add(name)
            if c.gpus > largest.get(t, 0.0):
                largest[t] = c.gpus
    return nodes, largest


def _keeps_entitlements(view: FairView, victims: Sequence[Candidate]) -> bool:
    """True when no victim's tenant drops below its entitlement with all of them gone."""
    return all(view.alloc.get(t, 0.0) - g >= view.entitled.get(t, 0.0) - EPS for t, g in _taken(victims).items())


def _excess(view: FairView) -> dict[str, float]:
    """GPUs each borrowing tenant holds beyond its entitlement."""
    return {t: held - view.entitled.get(t, 0.0) for t, held in view.alloc.items() if not view.below(t)}


def _planner(cyc, room: dict[str, float], waiting: set[str], min_runtime: float, max_preemptions: int,
             earlier: Sequence[Planner]) -> Planner:
    """A planner over the borrowing tenants' BE jobs, each tenant giving at
    most its ``room`` (GPUs); victims and vacating jobs already spoken for in
    this cycle (by TE jobs, by ``earlier`` planners) stay spoken for. One
    planner serves a whole pass: after each reclaim it withdraws the
    candidates whose tenant no longer borrows enough (``Planner.narrow``)
    and keeps its views of every other node."""
    index = ReclaimIndex(cyc.snapshot, cyc.now, max_preemptions, min_runtime, room)
    for other in (cyc.planner, *earlier):
        if other is not None:
            index.chosen |= other.index.chosen
            index.consumed |= other.index.consumed
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
