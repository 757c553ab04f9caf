"""Preemption planning: which BE jobs to preempt so that a TE job can start.

The planner is shared by every preempting policy; only the *choice* among
candidate victims differs (a ``VictimChooser``). The planner guarantees, for
every chooser:

* TE jobs are never victims, unless *demoted*: running for longer than the TE
  time limit in the current attempt, or with more work than that in total.
* A job already preempted ``max_preemptions`` times is never a victim.
* Resources already being vacated for this TE job (``preempted_for`` is it),
  or by preempting jobs nobody pending claims, are counted first, so a TE job
  never triggers more preemptions than it needs; such resources are consumed
  by at most one TE job per cycle, so two TE jobs never wait on the same
  victim.
* Victims are on the node(s) where the TE job is then meant to start, and a
  victim whose removal still leaves enough is dropped: none is preempted
  needlessly.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable, Iterable, Sequence

from scheduler.core.model import PendingJob
from scheduler.core.placement import FreeCapacity, per_unit, spread
from scheduler.core.victim_choosers import BoundedChooser, NodeMemo, VictimChooser, covers, drop_redundant
from scheduler.core.victim_ranking import RankedNodes, ViewOf
from scheduler.core.victims import Candidate, Need, HostView, PreemptionPlan, RunningIndex, Vacating

_NO_CANDS: list[Candidate] = []  # shared, never modified


@lru_cache(maxsize=None)
def _is_bounded(chooser_type: type) -> bool:
    """Whether a chooser class implements ``BoundedChooser``; cached, since a protocol check walks
    the protocol's members on every call and a planner is made per cycle (per decide call)."""
    return issubclass(chooser_type, BoundedChooser)


class Planner:
    """Finds a plan for each TE job that does not fit, within one cycle.

    Vacating jobs are split once into those claimed by a pending TE job and
    the shared rest; node views and per-node chooser results are cached and
    recomputed only for nodes that changed, so many TE jobs in one cycle cost
    little more than one.
    """

    def __init__(self, cap: FreeCapacity, index: RunningIndex, pending_te: set[str], chooser: VictimChooser) -> None:
        self.cap = cap
        self.index = index
        self.chooser = chooser
        self.memo = NodeMemo()
        self._shared_vac: dict[str, list[Vacating]] = {}
        self._own_vac: dict[str, dict[str, list[Vacating]]] = {}
        for w in index.vacating:
            owner = w.claimed_by
            target = self._own_vac.setdefault(owner, {}) if owner is not None and owner in pending_te else self._shared_vac
            for name in w.parts:
                target.setdefault(name, []).append(w)
        self._views: dict[str, HostView] = {}
        self._by_node: dict[str, list[Candidate]] | None = None
        # True once the candidate lists hold no chosen victim (each is taken out when chosen),
        # so views need not filter them: false for an index that came with victims chosen.
        self._pruned = False
        bounded = chooser if _is_bounded(type(chooser)) else None
        # The heap is handed ``_shared_view`` on each call rather than keeping it: a planner and its
        # heap holding each other would be a reference cycle that kept the cycle's views and
        # candidates alive after ``decide`` returned, until the garbage collector walked them.
        self._ranked = RankedNodes(bounded, cap, self._views) if bounded is not None else None
        cap.touched.clear()

    def plan(self, job: PendingJob, now: float, avoid: Callable[[], frozenset[str]] | None = None,
             unit: tuple[float, float] | None = None) -> PreemptionPlan | None:
        """A plan for ``job`` (not yet committed), or None when no preemption
        can make room. Nodes in ``avoid()`` get victims only if nothing else
        works (called only when victims are needed). ``unit``: the job's
        ``per_unit``, when the caller has it."""
        self._sync()
        cpg, mpg = unit if unit is not None else per_unit(job.spec)
        need = Need(job, job.spec.num_gpus, cpg, mpg, now)
        plan = self._wait_plan(need)
        if plan is not None:
            return plan
        avoided = avoid() if avoid is not None else None
        ranked = self._ranked
        if ranked is not None and not self._own_vac.get(need.job.spec.id):
            # Every view is shared: take the node from the heap instead of
            # building and scanning all of them (same result as ``single``).
            if avoided:
                # The same order as below: the nodes outside ``avoided`` first.
                picked = ranked.best(need, self._shared_view, avoided)
                if picked is not None:
                    return self._single_plan(need, picked)
                plan = self._multi_over(need, ranked.potentials(need, self._shared_view, avoided), self._shared_view)
                if plan is not None:
                    return plan
            picked = ranked.best(need, self._shared_view)
            if picked is not None:
                return self._single_plan(need, picked)
            return self._multi_over(need, ranked.potentials(need, self._shared_view), self._shared_view)
        views = self._all_views(need)
        if avoided:
            plan = self._victim_plan(need, [v for v in views if v.name not in avoided])
            if plan is not None:
                return plan
        return self._victim_plan(need, views)

    def commit(self, need_job: PendingJob, plan: PreemptionPlan, unit: tuple[float, float] | None = None) -> None:
        """Hold the plan's free capacity for the job and mark its victims and
        vacating jobs as spoken for, so later jobs in this cycle cannot use them
        (``unit`` as for ``plan``)."""
        cpg, mpg = unit if unit is not None else per_unit(need_job.spec)
        changed: set[str] = set()
        for name, k in plan.parts.items():
            vg, vc, vm = 0, 0.0, 0.0
            for w in plan.waits_on:
                if name in w.parts:
                    g, c, m = w.parts[name]
                    vg, vc, vm = vg + g, vc + c, vm + m
                    self.index.consumed.add((w.id, name))
                    changed.add(name)
            for v in plan.victims:
                if name in v.parts:
                    g, c, m = v.parts[name]
                    vg, vc, vm = vg + g, vc + c, vm + m
            cg = min(max(self.cap.gpus[name], 0), max(k - vg, 0))
            cc = min(max(self.cap.cpus(name), 0.0), max(k * cpg - vc, 0.0)) if cpg else 0.0
            cm = min(max(self.cap.mem(name), 0.0), max(k * mpg - vm, 0.0)) if mpg else 0.0
            if cg or cc or cm:
                self.cap.claim(name, cg, cc, cm)
        by_node = self._by_node if self._pruned else None
        for v in plan.victims:
            self.index.chosen.add(v.id)
            changed.update(v.parts)
            if by_node is not None:
                for name in v.parts:
                    cands = by_node.get(name, _NO_CANDS)
                    for i, c in enumerate(cands):
                        if c is v:
                            del cands[i]
                            break
        touched = self.cap.touched  # the claims' nodes (and any changed before): dropped now, not again at the next plan
        if touched:
            changed |= touched
            touched.clear()
        for name in changed:
            self._drop(name)

    def narrow(self, keep: Callable[[Candidate], bool], names: Iterable[str]) -> None:
        """Withdraw the candidates on nodes ``names`` that ``keep`` rejects (their eligibility ended in
        this cycle), forgetting only the views of the nodes that lose one: cheaper than a new planner,
        same plans after."""
        by_node = self.index.by_node
        for name in names:
            cands = by_node.get(name)
            if not cands:
                continue
            kept = [c for c in cands if keep(c)]
            if len(kept) != len(cands):
                cands[:] = kept
                self._drop(name)

    # --- internals ---------------------------------------------------------

    def _drop(self, name: str) -> None:
        self._views.pop(name, None)
        self.memo.drop(name)
        if self._ranked is not None:
            self._ranked.drop(name)

    def _single_plan(self, need: Need, picked: tuple[HostView, list[Candidate], float | None]) -> PreemptionPlan:
        view, victims, score = picked
        if len(victims) == 1:  # the usual plan, thousands of them in a large cycle: no lists to build
            until = view.vac_end if view.vac_end > need.now + victims[0].grace else need.now + victims[0].grace
            return PreemptionPlan({view.name: need.gpus}, list(victims), list(view.vac), until, score)
        until = max([view.vac_end] + [need.now + v.grace for v in victims])
        return PreemptionPlan({view.name: need.gpus}, sorted(victims, key=lambda v: v.id), list(view.vac), until, score)

    def _sync(self) -> None:
        """Forget views of nodes whose free capacity changed (Starts, claims)."""
        touched = self.cap.touched
        if touched:
            for name in touched:
                self._drop(name)
            touched.clear()

    def _avail(
        self, name: str, vac_lists: Sequence[Sequence[Vacating]], jid: str | None, now: float
    ) -> tuple[int, float, float, list[Vacating], float, int]:
        """Free plus not-yet-counted vacating resources on a node: (GPUs, CPUs,
        memory, vacating jobs, when the last is gone, GPUs vacating for ``jid``)."""
        g, c, m = self.cap.triple(name)
        if g < 0:
            g = 0
        if c < 0.0:
            c = 0.0
        if m < 0.0:
            m = 0.0
        if not any(vac_lists):
            return g, c, m, [], now, 0
        consumed = self.index.consumed
        vac: list[Vacating] = []
        mine = 0
        vac_end = now
        for lst in vac_lists:
            for w in lst:
                if (w.id, name) in consumed:
                    continue
                wg, wc, wm = w.parts[name]
                g, c, m = g + wg, c + wc, m + wm
                vac.append(w)
                if w.end > vac_end:
                    vac_end = w.end
                if jid is not None and w.claimed_by == jid:
                    mine += wg
        return g, c, m, vac, vac_end, mine

    def _make_view(self, name: str, vac_lists: Sequence[Sequence[Vacating]], jid: str | None, now: float) -> HostView:
        g, c, m, vac, vac_end, mine = self._avail(name, vac_lists, jid, now)
        return HostView(name, g, c, m, vac, vac_end, mine, self._cands(name), jid is None)

    def _cands(self, name: str) -> list[Candidate]:
        """The node's candidates not yet chosen as victims in this cycle."""
        if self._by_node is None:
            self._by_node = self.index.by_node
            self._pruned = not self.index.chosen
        cands = self._by_node.get(name, _NO_CANDS)
        if not self._pruned:
            chosen = self.index.chosen
            if chosen and cands:
                cands = [v for v in cands if v.id not in chosen]
        return cands

    def _shared_view(self, name: str, now: float) -> HostView:
        view = self._views.get(name)
        if view is None:
            vacating = self._shared_vac.get(name)
            if vacating:
                view = self._make_view(name, (vacating,), None, now)
            else:  # ``_make_view`` without the vacating pass: most nodes, thousands of views in a large cycle
                g, c, m = self.cap.triple(name)
                view = HostView(name, g if g > 0 else 0, c if c > 0.0 else 0.0, m if m > 0.0 else 0.0, [], now, 0,
                                self._cands(name), True)
            self._views[name] = view
        return view

    def _view(self, name: str, need: Need, own: dict[str, list[Vacating]] | None) -> HostView:
        if own and name in own:
            return self._make_view(name, (self._shared_vac.get(name, ()), own[name]), need.job.spec.id, need.now)
        return self._shared_view(name, need.now)

    def _all_views(self, need: Need) -> list[HostView]:
        own = self._own_vac.get(need.job.spec.id)
        if own:
            return [self._view(name, need, own) for name in self.cap.gpus]
        # Every view shared: read the cache directly (one view per node per plan; a reclaim pass
        # plans hundreds of jobs over thousands of nodes).
        views, make, now = self._views, self._shared_view, need.now
        return [v if (v := views.get(name)) is not None else make(name, now) for name in self.cap.gpus]

    def _wait_plan(self, need: Need) -> PreemptionPlan | None:
        """No new preemption: the job fits in free plus vacating resources.
        Only nodes with vacating resources are examined."""
        jid = need.job.spec.id
        own = self._own_vac.get(jid)
        names = set(self._shared_vac)
        if own:
            names.update(own)
        if not names:
            return None
        shared = self._shared_vac
        avail = {}
        for name in sorted(names):
            lists = (shared.get(name, ()), own[name]) if own and name in own else (shared.get(name, ()),)
            a = self._avail(name, lists, jid, need.now)
            if a[3]:
                avail[name] = a
        if not avail:
            return None
        fit = [(-a[5], a[0] - need.gpus, name) for name, a in avail.items() if need.units(a[0], a[1], a[2]) >= need.gpus]
        if fit:
            name = min(fit)[2]
            a = avail[name]
            return PreemptionPlan({name: need.gpus}, [], list(a[3]), a[4])
        units = []
        for name in self.cap.gpus:
            a = avail.get(name)
            u = need.units(a[0], a[1], a[2]) if a is not None else self.cap.units(name, need.cpg, need.mpg)
            if u > 0:
                units.append((u, name))
        parts = spread(units, need.gpus)
        if parts is None:
            return None
        waits = {w.id: w for n in parts if n in avail for w in avail[n][3]}
        until = max((avail[n][4] for n in parts if n in avail), default=need.now)
        return PreemptionPlan(parts, [], sorted(waits.values(), key=lambda w: w.id), until)

    def _victim_plan(self, need: Need, views: list[HostView]) -> PreemptionPlan | None:
        if not views:
            return None
        # Single node: only nodes that could host the whole job.
        key = ("feasible", need.shape)
        feasible = [
            v for v in views if v.cands and self.memo.get(v, key, lambda v=v: covers(need, v, v.cands))  # type: ignore[misc]
        ]
        if feasible:
            picked = self.chooser.single(need, feasible, self.memo)
            if picked is not None:
                return self._single_plan(need, picked)
        return self._multi(need, views)

    def _multi(self, need: Need, views: list[HostView]) -> PreemptionPlan | None:
        """Greedy across nodes: the fewest nodes whose potential (free,
        vacating and every candidate) reaches the need; victims taken in the
        chooser's order until the job fits there; unnecessary victims dropped."""
        pot = []
        for v in views:
            g, c, m = v.g, v.c, v.m
            for x in v.cands:
                xg, xc, xm = x.parts[v.name]
                g, c, m = g + xg, c + xc, m + xm
            u = need.units(g, c, m)
            if u > 0:
                pot.append((u, v.name))
        by_name = {v.name: v for v in views}
        return self._multi_over(need, pot, lambda name, now: by_name[name])

    def _multi_over(self, need: Need, pot: list[tuple[int, str]], view_of: ViewOf) -> PreemptionPlan | None:
        """``_multi`` given each node's potential in units (``(units, name)``, only those above 0)
        and the view of a node by name."""
        chosen = spread(pot, need.gpus)
        if chosen is None:
            return None
        names = frozenset(chosen)
        sel = [view_of(n, need.now) for n in sorted(names)]
        by_name = {v.name: v for v in sel}
        pool = {x.id: x for v in sel for x in v.cands}
        ordered = self.chooser.order(need, sorted(pool.values(), key=lambda x: x.id), names)

        def total(victims: list[Candidate]) -> int:
            s = 0
            for v in sel:
                g, c, m = v.g, v.c, v.m
                for x in victims:
                    if v.name in x.parts:
                        xg, xc, xm = x.parts[v.name]
                        g, c, m = g + xg, c + xc, m + xm
                s += need.units(g, c, m)
            return s

        taken: list[Candidate] = []
        for x in ordered:
            taken.append(x)
            if total(taken) >= need.gpus:
                break
        else:
            return None
        taken = drop_redundant(taken, lambda vs: total(vs) >= need.gpus)
        avail = []
        for v in sel:
            g, c, m = v.g, v.c, v.m
            for x in taken:
                if v.name in x.parts:
                    xg, xc, xm = x.parts[v.name]
                    g, c, m = g + xg, c + xc, m + xm
            avail.append((need.units(g, c, m), v.name))
        parts = spread(avail, need.gpus)
        if parts is None:  # pragma: no cover - total() guaranteed enough units
            return None
        waits = sorted({w.id: w for n in parts for w in by_name[n].vac}.values(), key=lambda w: w.id)
        until = max([by_name[n].vac_end for n in parts] + [need.now + x.grace for x in taken])
        return PreemptionPlan(parts, sorted(taken, key=lambda x: x.id), waits, until)



__all__ = ["Planner"]
