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

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

from scheduler.core.model import JobClass, PendingJob, RunningJob
from scheduler.core.placement import INF, FreeCapacity, per_unit, spread, units_of


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


def pending_is_demoted_te(job: PendingJob, te_time_limit: float) -> bool:
    """A pending TE job that already did more work than the limit queues as BE."""
    return job.progress > te_time_limit


class RunningIndex:
    """Victim candidates and vacating jobs per node, built once per cycle and
    only when some TE job needs preemption (it is O(running))."""

    def __init__(self, running: Iterable[RunningJob], now: float, te_time_limit: float, max_preemptions: int) -> None:
        self.by_node: dict[str, list[Candidate]] = {}
        self.vacating: list[Vacating] = []
        self.chosen: set[str] = set()  # victims picked in this cycle
        self.consumed: set[tuple[str, str]] = set()  # (vacating job, node) counted by a TE job this cycle
        for r in running:
            spec = r.spec
            if r.preempting:
                end = (r.notice_time if r.notice_time is not None else now) + spec.grace_period
                self.vacating.append(Vacating(r, spec.id, r.preempted_for, max(end, now), _parts(r)))
                continue
            if r.preemptions >= max_preemptions:
                continue
            demoted = False
            if spec.job_class == JobClass.TE:
                if not is_demoted_te(r, now, te_time_limit):
                    continue
                demoted = True
            c = Candidate(r, spec.id, spec.num_gpus, spec.grace_period, r.preemptions, r.attempt_start, demoted, _parts(r))
            for name in c.parts:
                self.by_node.setdefault(name, []).append(c)


@dataclass(slots=True)
class NodeView:
    """One node as a TE job sees it: what it can have there without new
    preemptions (free now plus resources being vacated for it), and the
    candidates that could free more."""

    name: str
    g: int
    c: float
    m: float
    free_g: int
    free_c: float
    free_m: float
    vac: list[Vacating]
    vac_end: float
    mine: int
    cands: list[Candidate]


@dataclass(slots=True)
class Need:
    """What a TE job needs: ``gpus`` units of ``cpg`` CPUs and ``mpg`` GB each."""

    job: PendingJob
    gpus: int
    cpg: float
    mpg: float
    now: float

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


class VictimChooser(Protocol):
    """The policy-specific part: pick victims on one node, and order victims
    for the multi-node greedy."""

    def single(self, need: Need, views: Sequence[NodeView]) -> tuple[NodeView, list[Candidate], float | None] | None:
        """Among nodes that can host the whole job with some victims, the node
        and victim set to use (plus a score, if the chooser has one)."""
        ...

    def order(self, need: Need, cands: list[Candidate], nodes: frozenset[str]) -> list[Candidate]:
        """Candidates in the order the multi-node greedy should take them."""
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
    """Finds a plan for each TE job that does not fit, within one cycle."""

    def __init__(self, cap: FreeCapacity, index: RunningIndex, pending_te: set[str], chooser: VictimChooser) -> None:
        self.cap = cap
        self.index = index
        self.pending_te = pending_te
        self.chooser = chooser

    def plan(self, job: PendingJob, now: float, avoid: frozenset[str]) -> Plan | None:
        """A plan for ``job`` (not yet committed), or None when no preemption
        can make room. Nodes in ``avoid`` are used only if nothing else works."""
        cpg, mpg = per_unit(job.spec)
        need = Need(job, job.spec.num_gpus, cpg, mpg, now)
        views = self._views(need)
        plan = self._wait_plan(need, views)
        if plan is not None:
            return plan
        if avoid:
            plan = self._victim_plan(need, [v for v in views if v.name not in avoid])
            if plan is not None:
                return plan
        return self._victim_plan(need, views)

    def commit(self, need_job: PendingJob, plan: Plan) -> None:
        """Hold the plan's free capacity for the job and mark its victims and
        vacating jobs as spoken for, so later jobs in this cycle cannot use them."""
        spec = need_job.spec
        cpg, mpg = per_unit(spec)
        for name, k in plan.parts.items():
            vg, vc, vm = 0, 0.0, 0.0
            for w in plan.waits_on:
                if name in w.parts:
                    g, c, m = w.parts[name]
                    vg, vc, vm = vg + g, vc + c, vm + m
                    self.index.consumed.add((w.id, name))
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

    # --- internals ---------------------------------------------------------

    def _views(self, need: Need) -> list[NodeView]:
        jid = need.job.spec.id
        vac_by_node: dict[str, list[Vacating]] = {}
        for w in self.index.vacating:
            owner = w.claimed_by
            if owner is not None and owner != jid and owner in self.pending_te:
                continue  # resources being freed for another waiting TE job
            for name in w.parts:
                if (w.id, name) not in self.index.consumed:
                    vac_by_node.setdefault(name, []).append(w)
        views = []
        cap = self.cap
        chosen = self.index.chosen
        for name, free_g in cap.gpus.items():
            free_c, free_m = cap.cpus(name), cap.mem(name)
            g, c, m = max(free_g, 0), max(free_c, 0.0), max(free_m, 0.0)
            vac = vac_by_node.get(name, [])
            mine = 0
            vac_end = need.now
            for w in vac:
                wg, wc, wm = w.parts[name]
                g, c, m = g + wg, c + wc, m + wm
                vac_end = max(vac_end, w.end)
                if w.claimed_by == jid:
                    mine += wg
            cands = [v for v in self.index.by_node.get(name, ()) if v.id not in chosen]
            views.append(NodeView(name, g, c, m, free_g, free_c, free_m, vac, vac_end, mine, cands))
        return views

    def _wait_plan(self, need: Need, views: list[NodeView]) -> Plan | None:
        """No new preemption: the job fits in free plus vacating resources."""
        fit = [v for v in views if v.vac and need.units(v.g, v.c, v.m) >= need.gpus]
        if fit:
            best = min(fit, key=lambda v: (-v.mine, v.g - need.gpus, v.name))
            return Plan({best.name: need.gpus}, [], list(best.vac), best.vac_end)
        if not any(v.vac for v in views):
            return None
        avail = [(u, v.name) for v in views if (u := need.units(v.g, v.c, v.m)) > 0]
        parts = spread(avail, need.gpus)
        if parts is None:
            return None
        by_name = {v.name: v for v in views}
        waits = {w.id: w for n in parts for w in by_name[n].vac}
        until = max((by_name[n].vac_end for n in parts), default=need.now)
        return Plan(parts, [], sorted(waits.values(), key=lambda w: w.id), until)

    def _victim_plan(self, need: Need, views: list[NodeView]) -> Plan | None:
        if not views:
            return None
        # Single node: only nodes that could host the whole job.
        feasible = [v for v in views if v.cands and covers(need, v, v.cands)]
        if feasible:
            picked = self.chooser.single(need, feasible)
            if picked is not None:
                view, victims, score = picked
                until = max([view.vac_end] + [need.now + v.grace for v in victims])
                return Plan({view.name: need.gpus}, sorted(victims, key=lambda v: v.id), list(view.vac), until, score)
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

    def single(self, need: Need, views: Sequence[NodeView]) -> tuple[NodeView, list[Candidate], float | None] | None:
        best = None
        best_key = None
        for view in views:
            victims = prefix_cover(need, view, sorted(view.cands, key=lambda x: (-x.start, x.id)))
            if victims is None:
                continue
            key = (len(victims), -min(x.start for x in victims), view.name)
            if best_key is None or key < best_key:
                best, best_key = (view, victims, None), key
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

    def single(self, need: Need, views: Sequence[NodeView]) -> tuple[NodeView, list[Candidate], float | None] | None:
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
    "INF",
    "Candidate",
    "NewestChooser",
    "NodeView",
    "Need",
    "Plan",
    "Planner",
    "RandomChooser",
    "RunningIndex",
    "Vacating",
    "VictimChooser",
    "covers",
    "drop_redundant",
    "is_demoted_te",
    "pending_is_demoted_te",
    "prefix_cover",
]
