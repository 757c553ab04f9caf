"""Preemption planning: which BE jobs to preempt so that a TE job can start.

This module is shared by every preempting policy; only the *choice* among
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

import heapq
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable

from scheduler.core.model import JobClass, PendingJob, RunningJob
from scheduler.core.placement import FreeCapacity, per_unit, spread, units_of


@dataclass(slots=True)
class Candidate:
    """A running job that may be preempted, with what it frees per node."""

    job: RunningJob
    id: str
    gpus: int
    grace: float
    preemptions: int
    start: float
    demoted_te: bool
    parts: dict[str, tuple[int, float, float]]


@dataclass(slots=True)
class Vacating:
    """A job that received a preemption notice and still holds resources."""

    job: RunningJob
    id: str
    claimed_by: str | None
    end: float
    parts: dict[str, tuple[int, float, float]]


def _parts(job: RunningJob) -> dict[str, tuple[int, float, float]]:
    spec = job.spec
    g = spec.num_gpus
    return {n: (k, spec.num_cpus * k / g, spec.mem_gb * k / g) for n, k in job.placement.parts}


def is_demoted_te(job: RunningJob, now: float, te_time_limit: float) -> bool:
    """A TE job that has run longer than the limit (this attempt, or in total)
    is treated as BE from then on."""
    return max(now - job.attempt_start, job.progress) > te_time_limit


class RunningIndex:
    """Vacating jobs, and victim candidates per node, for one cycle. Built
    only when some TE job does not fit; the candidates (the costlier part) only
    when a TE job cannot be served by resources already vacating."""

    def __init__(self, running: Sequence[RunningJob], now: float, te_time_limit: float, max_preemptions: int) -> None:
        self._running = running
        self._now = now
        self._te_time_limit = te_time_limit
        self._max_preemptions = max_preemptions
        self._by_node: dict[str, list[Candidate]] | None = None
        self.chosen: set[str] = set()  # victims picked in this cycle
        self.consumed: set[tuple[str, str]] = set()  # (vacating job, node) counted by a TE job this cycle
        self.vacating: list[Vacating] = []
        for r in running:
            if r.preempting:
                spec = r.spec
                end = (r.notice_time if r.notice_time is not None else now) + spec.grace_period
                self.vacating.append(Vacating(r, spec.id, r.preempted_for, max(end, now), _parts(r)))

    @property
    def by_node(self) -> dict[str, list[Candidate]]:
        if self._by_node is None:
            by_node: dict[str, list[Candidate]] = {}
            now, limit, cap = self._now, self._te_time_limit, self._max_preemptions
            te = JobClass.TE
            for r in self._running:
                if r.preempting or r.preemptions >= cap:
                    continue
                spec = r.spec
                demoted = spec.job_class is te
                if demoted and not is_demoted_te(r, now, limit):
                    continue
                c = Candidate(r, spec.id, spec.num_gpus, spec.grace_period, r.preemptions, r.attempt_start, demoted, _parts(r))
                for name in c.parts:
                    lst = by_node.get(name)
                    if lst is None:
                        by_node[name] = [c]
                    else:
                        lst.append(c)
            self._by_node = by_node
        return self._by_node


@dataclass(slots=True)
class NodeView:
    """One node as a TE job sees it: what it can have there without new
    preemptions (free now plus resources being vacated for it), and the
    candidates that could free more. ``shared`` views (no resources vacating
    for this very job) are the same for every TE job and cached per cycle."""

    name: str
    g: int
    c: float
    m: float
    vac: list[Vacating]
    vac_end: float
    mine: int
    cands: list[Candidate]
    shared: bool


Shape = tuple[int, float, float]


@dataclass(slots=True)
class Need:
    """What a TE job needs: ``gpus`` units of ``cpg`` CPUs and ``mpg`` GB each."""

    job: PendingJob
    gpus: int
    cpg: float
    mpg: float
    now: float

    @property
    def shape(self) -> Shape:
        return (self.gpus, self.cpg, self.mpg)

    def units(self, g: int, c: float, m: float) -> int:
        return units_of(g, c, m, self.cpg, self.mpg)


@dataclass(slots=True)
class Plan:
    """How a TE job will get its resources: GPUs per node, victims to preempt
    now and vacating jobs it waits for. ``until`` is when the last of them is
    expected to be gone (grace periods are upper bounds)."""

    parts: dict[str, int]
    victims: list[Candidate] = field(default_factory=list)
    waits_on: list[Vacating] = field(default_factory=list)
    until: float = 0.0
    score: float | None = None


_MISSING = object()
_NO_CANDS: list[Candidate] = []  # shared, never modified


class NodeMemo:
    """Per-node results computed from a shared view, reused by every TE job of
    the cycle until that node changes (a Start, a claim, a victim or vacating
    job spoken for). Cached lists must not be modified by their users."""

    __slots__ = ("_by_node",)

    def __init__(self) -> None:
        self._by_node: dict[str, dict[tuple[object, ...], object]] = {}

    def get(self, view: NodeView, key: tuple[object, ...], compute: Callable[[], object]) -> object:
        if not view.shared:
            return compute()
        d = self._by_node.setdefault(view.name, {})
        got = d.get(key, _MISSING)
        if got is _MISSING:
            got = d[key] = compute()
        return got

    def drop(self, name: str) -> None:
        self._by_node.pop(name, None)


class VictimChooser(Protocol):
    """The policy-specific part: pick victims on one node, and order victims
    for the multi-node greedy."""

    def single(
        self, need: Need, views: Sequence[NodeView], memo: NodeMemo
    ) -> tuple[NodeView, list[Candidate], float | None] | None:
        """Among ``views`` (nodes that could host the whole job with all their
        candidates preempted), the node and victim set to use, plus a score if
        the chooser has one. ``memo`` caches per-node work across TE jobs."""
        ...

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        """Candidates in the order the multi-node greedy should take them."""
        ...


@runtime_checkable
class BoundedChooser(Protocol):
    """A chooser whose ``single`` returns the node of least ``rank`` and can
    bound it from below per node; the planner then keeps the nodes in a heap
    across the TE jobs of a cycle instead of scanning them per job."""

    def floor(self, view: NodeView, now: float) -> tuple:
        """A lower bound on every ``rank`` the node can have for any TE job
        (``view`` has candidates); a function of the shared view and ``now``
        only. It must never equal the rank of another node."""
        ...

    def best_on_node(self, need: Need, view: NodeView, memo: NodeMemo) -> tuple[float, list[Candidate]] | None:
        """The node's best (score, victims), or None; cached in ``memo``."""
        ...

    def rank(self, score: float, victims: Sequence[Candidate], name: str) -> tuple:
        """``single`` returns the node of least rank among its views; no
        rank of a node is below its ``floor``."""
        ...


def covers(need: Need, view: NodeView, victims: Iterable[Candidate]) -> bool:
    g, c, m = view.g, view.c, view.m
    name = view.name
    for v in victims:
        vg, vc, vm = v.parts[name]
        g += vg
        c += vc
        m += vm
    return need.units(g, c, m) >= need.gpus


def prefix_cover(need: Need, view: NodeView, ordered: Iterable[Candidate]) -> list[Candidate] | None:
    """Take candidates in order until the node can host the job, then drop the
    ones that turned out unnecessary (last taken kept first)."""
    g, c, m = view.g, view.c, view.m
    taken: list[Candidate] = []
    for v in ordered:
        vg, vc, vm = v.parts[view.name]
        g, c, m = g + vg, c + vc, m + vm
        taken.append(v)
        if need.units(g, c, m) >= need.gpus:
            return drop_redundant(taken, lambda vs: covers(need, view, vs))
    return None


def drop_redundant(taken: list[Candidate], ok: Callable[[list[Candidate]], bool]) -> list[Candidate]:
    """Remove victims (earliest taken first) whose removal keeps ``ok``."""
    kept = list(taken)
    for v in list(taken[:-1]):
        trial = [x for x in kept if x is not v]
        if ok(trial):
            kept = trial
    return kept


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
        self._views: dict[str, NodeView] = {}
        self._facts: dict[str, tuple[float, tuple, tuple[int, float, float]] | None] = {}
        self._by_node: dict[str, list[Candidate]] | None = None
        # For choosers with a per-node lower bound (``BoundedChooser``): per
        # (job shape, now), a heap of (key, node, version, best found) over the
        # nodes that could host the job, kept up to date from the log of
        # dropped nodes; an entry whose version is not the node's current one
        # is stale. Built on first use, so one heap per shape per cycle.
        self._version: dict[str, int] = {}
        self._dropped: list[str] = []
        self._heaps: dict[tuple[Shape, float], tuple[list[tuple[tuple, str, int, object]], list[int]]] = {}
        self._bounded = chooser if isinstance(chooser, BoundedChooser) else None
        cap.touched.clear()

    def plan(self, job: PendingJob, now: float, avoid: Callable[[], frozenset[str]] | None = None) -> Plan | None:
        """A plan for ``job`` (not yet committed), or None when no preemption
        can make room. Nodes in ``avoid()`` get victims only if nothing else
        works (called only when victims are needed)."""
        self._sync()
        cpg, mpg = per_unit(job.spec)
        need = Need(job, job.spec.num_gpus, cpg, mpg, now)
        plan = self._wait_plan(need)
        if plan is not None:
            return plan
        avoided = avoid() if avoid is not None else None
        bounded = self._bounded
        if bounded is not None and not avoided and not self._own_vac.get(need.job.spec.id):
            # Every view is shared: take the node from the heap instead of
            # building and scanning all of them (same result as ``single``).
            picked = self._bounded_single(need, bounded)
            if picked is not None:
                return self._single_plan(need, picked)
            return self._multi(need, self._all_views(need))
        views = self._all_views(need)
        if avoided:
            plan = self._victim_plan(need, [v for v in views if v.name not in avoided])
            if plan is not None:
                return plan
        return self._victim_plan(need, views)

    def commit(self, need_job: PendingJob, plan: Plan) -> None:
        """Hold the plan's free capacity for the job and mark its victims and
        vacating jobs as spoken for, so later jobs in this cycle cannot use them."""
        spec = need_job.spec
        cpg, mpg = per_unit(spec)
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
        for v in plan.victims:
            self.index.chosen.add(v.id)
            changed.update(v.parts)
        for name in changed:
            self._drop(name)

    # --- internals ---------------------------------------------------------

    def _drop(self, name: str) -> None:
        self._views.pop(name, None)
        self._facts.pop(name, None)
        self.memo.drop(name)
        self._version[name] = self._version.get(name, 0) + 1
        self._dropped.append(name)

    def _node_facts(
        self, name: str, now: float, bounded: "BoundedChooser"
    ) -> tuple[float, tuple, tuple[int, float, float]] | None:
        """``(now, floor, potential)`` of a node's shared view, None when it has
        no candidates: the chooser's floor on the node's rank and what the
        node would have with every candidate preempted. Neither depends on the
        TE job, so every shape's heap shares them until the node changes."""
        facts = self._facts.get(name, _MISSING)
        if facts is _MISSING or (facts is not None and facts[0] != now):  # type: ignore[index]
            view = self._shared_view(name, now)
            if not view.cands:
                facts = None
            else:
                g, c, m = view.g, view.c, view.m
                for v in view.cands:
                    vg, vc, vm = v.parts[name]
                    g += vg
                    c += vc
                    m += vm
                facts = (now, bounded.floor(view, now), (g, c, m))
            self._facts[name] = facts
        return facts  # type: ignore[return-value]

    def _heap_entry(self, name: str, need: Need, bounded: "BoundedChooser") -> tuple[tuple, str, int, object] | None:
        """A not yet searched node's entry: (floor, name, version, None) when
        it could host the whole job with all its candidates preempted (what
        ``covers`` checks), else None."""
        facts = self._node_facts(name, need.now, bounded)
        if facts is None or need.units(*facts[2]) < need.gpus:
            return None
        return (facts[1], name, self._version.get(name, 0), None)

    def _bounded_single(
        self, need: Need, bounded: "BoundedChooser"
    ) -> tuple[NodeView, list[Candidate], float | None] | None:
        """The feasible shared node of least ``rank``, as ``bounded.single``
        finds it, from a heap kept across the cycle's TE jobs of this shape.

        Entries are keyed by the chooser's ``floor`` until the node is
        searched, then by its rank. When a searched node comes out on top,
        every other node has a rank (or a floor, which no rank of that node
        is below) above it, so it is the least-rank node over all, which is
        what ``single``'s early-stopping scan returns."""
        key = (need.shape, need.now)
        held = self._heaps.get(key)
        if held is None:
            heap = [e for name in self.cap.gpus if (e := self._heap_entry(name, need, bounded)) is not None]
            heapq.heapify(heap)
            held = self._heaps[key] = (heap, [len(self._dropped)])
        else:
            heap, pos = held
            if pos[0] < len(self._dropped):
                for name in set(self._dropped[pos[0]:]):
                    e = self._heap_entry(name, need, bounded)
                    if e is not None:
                        heapq.heappush(heap, e)
                pos[0] = len(self._dropped)
        heap = held[0]
        version, views, memo = self._version, self._views, self.memo
        while heap:
            rank, name, ver, found = heap[0]
            if ver != version.get(name, 0):
                heapq.heappop(heap)  # the node changed since; a newer entry exists if it is still feasible
                continue
            view = views[name]
            if found is not None:
                score, victims = found
                return view, victims, score
            heapq.heappop(heap)
            found = bounded.best_on_node(need, view, memo)
            if found is not None:  # else: left out until the node changes
                heapq.heappush(heap, (bounded.rank(found[0], found[1], name), name, ver, found))
        return None

    def _single_plan(self, need: Need, picked: tuple[NodeView, list[Candidate], float | None]) -> Plan:
        view, victims, score = picked
        until = max([view.vac_end] + [need.now + v.grace for v in victims])
        return Plan({view.name: need.gpus}, sorted(victims, key=lambda v: v.id), list(view.vac), until, score)

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

    def _make_view(self, name: str, vac_lists: Sequence[Sequence[Vacating]], jid: str | None, now: float) -> NodeView:
        g, c, m, vac, vac_end, mine = self._avail(name, vac_lists, jid, now)
        if self._by_node is None:
            self._by_node = self.index.by_node
        chosen = self.index.chosen
        cands = self._by_node.get(name, _NO_CANDS)
        if chosen and cands:
            cands = [v for v in cands if v.id not in chosen]
        return NodeView(name, g, c, m, vac, vac_end, mine, cands, jid is None)

    def _shared_view(self, name: str, now: float) -> NodeView:
        view = self._views.get(name)
        if view is None:
            view = self._make_view(name, (self._shared_vac.get(name, ()),), None, now)
            self._views[name] = view
        return view

    def _view(self, name: str, need: Need, own: dict[str, list[Vacating]] | None) -> NodeView:
        if own and name in own:
            return self._make_view(name, (self._shared_vac.get(name, ()), own[name]), need.job.spec.id, need.now)
        return self._shared_view(name, need.now)

    def _all_views(self, need: Need) -> list[NodeView]:
        own = self._own_vac.get(need.job.spec.id)
        return [self._view(name, need, own) for name in self.cap.gpus]

    def _wait_plan(self, need: Need) -> Plan | None:
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
            return Plan({name: need.gpus}, [], list(a[3]), a[4])
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
        return Plan(parts, [], sorted(waits.values(), key=lambda w: w.id), until)

    def _victim_plan(self, need: Need, views: list[NodeView]) -> Plan | None:
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

    def _multi(self, need: Need, views: list[NodeView]) -> Plan | None:
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
        chosen = spread(pot, need.gpus)
        if chosen is None:
            return None
        names = frozenset(chosen)
        by_name = {v.name: v for v in views}
        sel = [by_name[n] for n in sorted(names)]
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
        return Plan(parts, sorted(taken, key=lambda x: x.id), waits, until)


# --- the two baseline choosers ---------------------------------------------


class NewestChooser:
    """Victims are the most recently started jobs (the common Kubernetes
    choice). On each node, newest first until the job fits; the node needing
    the fewest victims wins, then the one whose victims started latest."""

    def single(
        self, need: Need, views: Sequence[NodeView], memo: NodeMemo
    ) -> tuple[NodeView, list[Candidate], float | None] | None:
        best = None
        best_key = None
        key = ("newest", need.shape)
        for view in views:
            victims = memo.get(
                view, key, lambda view=view: prefix_cover(need, view, sorted(view.cands, key=lambda x: (-x.start, x.id)))
            )
            if victims is None:
                continue
            assert isinstance(victims, list)
            k = (len(victims), -min(x.start for x in victims), view.name)
            if best_key is None or k < best_key:
                best, best_key = (view, victims, None), k
        return best

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        return sorted(cands, key=lambda x: (-x.start, x.id))


class RandomChooser:
    """Victims chosen at random, reproducibly: the generator is re-seeded from
    (seed, time, TE job id) for every decision, so the same snapshot and time
    give the same victims whatever happened before."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    def _reseed(self, need: Need) -> random.Random:
        self.rng.seed(f"{self.seed}/{need.now!r}/{need.job.spec.id}")
        return self.rng

    def single(
        self, need: Need, views: Sequence[NodeView], memo: NodeMemo
    ) -> tuple[NodeView, list[Candidate], float | None] | None:
        rng = self._reseed(need)
        view = rng.choice(sorted(views, key=lambda v: v.name))
        cands = sorted(view.cands, key=lambda x: x.id)
        rng.shuffle(cands)
        victims = prefix_cover(need, view, cands)
        return None if victims is None else (view, victims, None)

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        rng = self._reseed(need)
        out = list(cands)
        rng.shuffle(out)
        return out


__all__ = [
    "BoundedChooser",
    "Candidate",
    "NewestChooser",
    "NodeView",
    "Need",
    "NodeMemo",
    "Plan",
    "Planner",
    "RandomChooser",
    "RunningIndex",
    "Vacating",
    "VictimChooser",
    "covers",
    "drop_redundant",
    "is_demoted_te",
    "prefix_cover",
]
