"""Rubick: reconfiguration-aware scheduling (Zhang et al., arXiv 2408.08586).

Every cycle, for every reconfigurable job (``JobSpec.throughput`` set), the
policy considers allocations of GPUs (and the CPUs that go with them) and,
for each, the best allowed execution plan; it then

1. **admits** pending jobs in order (guaranteed jobs first, then arrival
   order): a job starts on the fewest GPUs at which its best plan is at
   least as fast as what it asked for (its *right size*; a better plan often
   needs fewer GPUs than the user's). A best-effort job that cannot get that
   starts on the allocation that is fastest among those that fit, as long as
   that is not more than its right size; a guaranteed job never starts below
   its requested throughput. When nothing fits, resources are *reclaimed*:
   from jobs grown beyond their right size (for any job), and, for a
   guaranteed job, from best-effort jobs down to their minimum, the
   cheapest loss of normalized throughput per GPU first, and only when the
   job admitted gains more than the others lose;
2. **grows or reshapes** running jobs when no job is left waiting: free GPUs
   go, one job at a time, to the change with the largest gain of normalized
   throughput per extra GPU, a change being taken only when it pays for
   itself: with ``R`` iterations left, ``R t_now > restart_time + R t_new``
   by a margin of ``min_gain`` (relative). Changes that need no more GPUs
   (a faster placement or plan) rank first.

Normalized throughput is a job's speed on an allocation divided by its speed
as requested (docs/rubick.md explains why the sum of it is the objective).
A job is reconfigured at most once per ``min_interval`` seconds; jobs
started in this cycle may still be resized in it at no cost. Running jobs
without a throughput function, preempting or mid-reconfiguration jobs hold
their resources untouched. Pure and deterministic: no clock, no randomness,
ties broken by job id.

Anti-starvation: when a pending job that cannot be admitted has waited more
than ``starvation_threshold``, no job behind it is admitted and nothing grows
until it starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scheduler.core.decisions import Decision, Pend, Preempt, Reason, Reconfigure, Start
from scheduler.core.model import JobClass, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import full_free
from scheduler.core.policies.base import DEFAULT_STARVATION_THRESHOLD, check_non_negative, describe_placement, gpus_text
from scheduler.core.policies.reconfig import (
    FLOOR_SLACK,
    JobModel,
    Option,
    Pool,
    cpus_per_gpu,
    mem_per_gpu,
    placement_of,
    shrink_parts,
)
from scheduler.core.policy import register

DEFAULT_RESTART_TIME = 60.0
"""Seconds a reconfigured job spends checkpointing and relaunching (the
simulator's default reconfiguration overhead)."""
DEFAULT_MIN_INTERVAL = 600.0
"""Seconds between two reconfigurations of one job: ten restarts' worth, so
restarts cost at most about a tenth of a job's time."""
DEFAULT_MIN_GAIN = 0.05
"""A change must shorten the job's expected remaining time by this fraction."""
DEFAULT_BE_FLOOR = 0.8
"""A best-effort job is admitted on the fewest GPUs giving it this share of
its requested throughput."""
DEFAULT_START_FLOOR = 0.5
"""...or, when that does not fit, on what fits if it gives at least this share."""
ORDERS = ("work", "arrival")
DEFAULT_MAX_PREEMPTIONS = 0
"""How often a best-effort job may be preempted for guaranteed jobs (then never
again). 0: never. On workload-mt, allowing 3 let the large guaranteed jobs
take the cluster sooner and made more of the small guaranteed jobs late
(docs/results.md, Reconfiguration (Rubick), ablations)."""


@dataclass(slots=True)
class Live:
    """A running (or just started) reconfigurable job and its current option."""

    id: str
    model: JobModel
    opt: Option
    remaining: float  # iterations left (inf when the job declared none)
    guaranteed: bool
    movable: bool  # may be reconfigured in this cycle
    fresh: bool  # started in this cycle: resizing costs nothing
    running: RunningJob | None = None
    pending: PendingJob | None = None
    changed: bool = False

    @property
    def held(self) -> dict[str, int]:
        """What the job holds in the snapshot (before this cycle's changes)."""
        return dict(self.running.placement.parts) if self.running is not None else {}


@dataclass(slots=True)
class _Cycle:
    snapshot: Snapshot
    now: float
    pool: Pool
    explain: bool
    live: dict[str, Live] = field(default_factory=dict)
    starts: dict[str, Live] = field(default_factory=dict)
    empty: Pool | None = None  # the cluster with nothing running: sizes are judged on it
    reconfigs: dict[str, tuple[Live, str | None, Reason]] = field(default_factory=dict)
    awaited: set[str] = field(default_factory=set)  # pending jobs running jobs shrink for
    preempted: set[str] = field(default_factory=set)  # jobs preempted in this cycle
    out: list[Decision] = field(default_factory=list)


@register("rubick")
class Rubick:
    """See the module doc. Parameters (keyword only): ``restart_time`` (s,
    the reconfiguration cost the policy weighs), ``min_interval`` (s between
    two reconfigurations of a job), ``min_gain`` (relative shortening a change
    must bring), ``grow`` (False: admission and reclaiming only),
    ``starvation_threshold`` (s; None: off), ``explain`` (emit Pend)."""

    name = "rubick"
    decide_without_pending = True

    def __init__(
        self,
        *,
        restart_time: float = DEFAULT_RESTART_TIME,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        min_gain: float = DEFAULT_MIN_GAIN,
        be_floor: float = DEFAULT_BE_FLOOR,
        start_floor: float = DEFAULT_START_FLOOR,
        order: str = "work",
        grow: bool = True,
        repack: bool = True,
        max_preemptions: int = DEFAULT_MAX_PREEMPTIONS,
        starvation_threshold: float | None = DEFAULT_STARVATION_THRESHOLD,
        explain: bool = True,
    ) -> None:
        check_non_negative("restart_time", restart_time)
        check_non_negative("min_interval", min_interval)
        check_non_negative("min_gain", min_gain)
        check_non_negative("starvation_threshold", starvation_threshold, allow_none=True)
        if min_gain >= 1:
            raise ValueError(f"min_gain must be < 1, got {min_gain!r}")
        for pname, value in (("be_floor", be_floor), ("start_floor", start_floor)):
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"{pname} must be in (0, 1], got {value!r}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        self.be_floor = float(be_floor)
        self.start_floor = float(start_floor)
        self.order = order
        self.restart_time = float(restart_time)
        self.min_interval = float(min_interval)
        self.min_gain = float(min_gain)
        self.grow = bool(grow)
        self.repack = bool(repack)
        if not isinstance(max_preemptions, int) or isinstance(max_preemptions, bool) or max_preemptions < 0:
            raise ValueError(f"max_preemptions must be an integer >= 0, got {max_preemptions!r}")
        self.max_preemptions = max_preemptions
        self.starvation_threshold = starvation_threshold
        self.explain = bool(explain)

    # --- entry point ---------------------------------------------------------

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        cyc = _Cycle(snapshot, now, Pool.of(snapshot.nodes, snapshot.running, snapshot.free), self.explain)
        cyc.empty = Pool(full_free(snapshot.nodes))
        for r in snapshot.running:
            if r.reconfiguring and r.reconfigured_for is not None:
                cyc.awaited.add(r.reconfigured_for)
            if r.preempting and r.preempted_for is not None:
                cyc.awaited.add(r.preempted_for)
            live = self._live(cyc, r)
            if live is not None:
                cyc.live[live.id] = live
        waiting = self._admit(cyc)
        if self.grow and not waiting:
            self._improve(cyc)
        self._emit(cyc)
        return cyc.out

    def _model(self, cyc: _Cycle, spec) -> JobModel:
        model = JobModel(spec)
        model.fit_ceiling(cyc.empty)
        return model

    def _live(self, cyc: _Cycle, r: RunningJob) -> Live | None:
        spec = r.spec
        now = cyc.now
        if r.preempting or r.reconfiguring or not spec.reconfigurable or not r.plan:
            return None
        model = self._model(cyc, spec)
        parts = dict(r.placement.parts)
        cpus = spec.num_cpus
        speed = model.speed_of(r.plan, parts, cpus)
        if speed is None:
            return None
        seconds = model.ref / speed
        opt = Option(tuple(sorted(parts.items())), cpus, r.plan, seconds, speed)
        movable = r.last_reconfigure is None or now - r.last_reconfigure >= self.min_interval - 1e-9
        remaining = max(spec.steps - r.steps_done, 0.0) if spec.steps else math.inf
        return Live(spec.id, model, opt, remaining, spec.guaranteed, movable, False, running=r)

    # --- 1. admission ----------------------------------------------------------

    def _admit(self, cyc: _Cycle) -> bool:
        """Start pending jobs; True when some job is left waiting (nothing
        may grow then: free GPUs are kept for it)."""
        pending = sorted(cyc.snapshot.pending, key=lambda p: self._queue_key(cyc, p))
        waiting = False
        blocked_by: PendingJob | None = None
        for p in pending:
            if p.hold_reason is not None:
                if cyc.explain:
                    cyc.out.append(Pend(p.spec.id, Reason[_reason_name(p.hold_reason)], p.hold_message or p.hold_reason))
                continue
            if blocked_by is not None:
                if cyc.explain:
                    cyc.out.append(Pend(p.spec.id, Reason.PRIORITY,
                                        f"behind job {blocked_by.spec.id}, which has waited past the starvation threshold"))
                continue
            if self._admit_one(cyc, p):
                continue
            waiting = True
            if self.starvation_threshold is not None and cyc.now - p.spec.submit_time > self.starvation_threshold:
                blocked_by = p
            if cyc.explain:
                cyc.out.append(Pend(p.spec.id, Reason.RESOURCES, self._pend_message(cyc, p)))
        return waiting or blocked_by is not None

    def _queue_key(self, cyc: _Cycle, p: PendingJob) -> tuple:
        """Guaranteed jobs before the others; within each, TE jobs, then jobs
        past the starvation threshold, in arrival order; then the rest, by
        expected work (GPU-seconds at their admission size; ``order="work"``)
        or in arrival order."""
        spec = p.spec
        head = (not spec.guaranteed, spec.job_class is not JobClass.TE)
        starving = self.starvation_threshold is not None and cyc.now - spec.submit_time > self.starvation_threshold
        if spec.job_class is JobClass.TE or starving or self.order == "arrival":
            return (*head, not starving, 0.0, spec.submit_time, spec.id)
        return (*head, True, self._work(cyc, p), spec.submit_time, spec.id)

    def _work(self, cyc: _Cycle, p: PendingJob) -> float:
        spec = p.spec
        if not (spec.reconfigurable and spec.throughput is not None and spec.steps):
            return math.inf
        model = self._model(cyc, spec)
        target = model.right_size(cyc.empty, self.floor(model, spec.guaranteed))
        if target is None:
            return math.inf
        return max(spec.steps - p.steps_done, 0.0) * target.seconds * target.gpus

    def _admit_one(self, cyc: _Cycle, p: PendingJob) -> bool:
        spec = p.spec
        pool = cyc.pool
        if not (spec.reconfigurable and spec.throughput is not None):
            parts = pool.place(spec.num_gpus, cpus_per_gpu(spec), mem_per_gpu(spec))
            if parts is None:
                return False
            pool.take(parts, cpus_per_gpu(spec), mem_per_gpu(spec))
            cyc.out.append(Start(spec.id, placement_of(parts), Reason.SCHEDULED,
                                 f"started on {describe_placement(placement_of(parts))}"))
            return True
        if spec.id in cyc.awaited:
            return False  # running jobs are giving up resources for it
        model = self._model(cyc, spec)
        opt = self._start_option(cyc, model, pool, spec.guaranteed)
        if opt is None:
            opt = self._reclaim(cyc, model, spec.id, spec.guaranteed)
            if opt is None and self.repack:
                opt = self._repack(cyc, model, spec.id, spec.guaranteed)
            if opt is None and spec.guaranteed and self.max_preemptions > 0:
                self._preempt_for(cyc, model, spec.id)
                return False
            if opt is not None and spec.id in cyc.awaited:
                return False  # a donor checkpoints first: start when it has shrunk
        if opt is None:
            return False
        pool.take(opt.as_dict, model.cpg, model.mpg)
        remaining = max(spec.steps - p.steps_done, 0.0) if spec.steps else math.inf
        cyc.starts[spec.id] = Live(spec.id, model, opt, remaining, spec.guaranteed, True, True, pending=p)
        return True

    def floor(self, model: JobModel, guaranteed: bool) -> float:
        """Normalized throughput a job is admitted at: 1.0 when guaranteed,
        ``be_floor`` otherwise, neither above what the whole cluster can give
        it (``model.guarantee``)."""
        return model.guarantee if guaranteed else min(self.be_floor, model.guarantee)

    def _start_option(self, cyc: _Cycle, model: JobModel, pool: Pool, guaranteed: bool) -> Option | None:
        """The right size if it fits; else, for a best-effort job, the fastest
        option that fits, up to the right size on packed nodes, if it reaches
        ``start_floor``."""
        opt = model.right_size(pool, self.floor(model, guaranteed))
        if opt is not None or guaranteed:
            return opt
        packed = model.right_size(cyc.empty, self.floor(model, False))
        cap = packed.gpus if packed is not None else model.hi
        best: Option | None = None
        for g in range(model.lo, min(cap, pool.gpus) + 1):
            o = model.place(pool, g)
            if (o is not None and o.speed >= min(self.start_floor, model.guarantee) - FLOOR_SLACK
                    and (best is None or o.speed > best.speed + FLOOR_SLACK)):
                best = o
        return best

    def _reclaim(self, cyc: _Cycle, model: JobModel, job_id: str, guaranteed: bool) -> Option | None:
        """Shrink running jobs until the pending job fits (see the module doc);
        nothing is changed when it does not."""
        pool = cyc.pool
        target = model.right_size(cyc.empty, self.floor(model, guaranteed))
        if target is None:
            return None
        donors = []
        for live in list(cyc.live.values()) + list(cyc.starts.values()):
            if live.changed or not live.movable or live.id == job_id:
                continue
            if live.guaranteed:
                floor_gpus = self._floor_size(live)
            elif guaranteed:
                floor_gpus = live.model.lo
            else:
                # For a best-effort job, down to what still gives the donor
                # ``start_floor`` of its request (only if the sum gains).
                least = live.model.right_size(cyc.empty, min(self.start_floor, live.model.guarantee))
                floor_gpus = least.gpus if least is not None else live.opt.gpus
            if floor_gpus is None or live.opt.gpus <= floor_gpus:
                continue
            donors.append((live, floor_gpus))
        if not donors:
            return None
        cuts: list[tuple[Live, Option]] = []
        lost = 0.0
        for live, floor_gpus in sorted(donors, key=lambda d: (self._loss_per_gpu(d[0], d[1]), d[0].id)):
            need = target.gpus - pool.gpus
            if need <= 0:
                break
            cut = self._cut(live, need, floor_gpus)
            if cut is None:
                continue
            pool.give(live.opt.as_dict, live.model.cpg, live.model.mpg)
            pool.take(cut.as_dict, live.model.cpg, live.model.mpg)
            cuts.append((live, cut))
            lost += live.opt.speed - cut.speed
        opt = self._start_option(cyc, model, pool, guaranteed) if cuts else None
        if opt is None or (not guaranteed and opt.speed <= lost):
            for live, cut in reversed(cuts):
                pool.give(cut.as_dict, live.model.cpg, live.model.mpg)
                pool.take(live.opt.as_dict, live.model.cpg, live.model.mpg)
            return None
        for live, cut in cuts:
            if self._change(cyc, live, cut, job_id, Reason.SHRUNK_FOR_JOB):
                cyc.awaited.add(job_id)
        return opt

    def _repack(self, cyc: _Cycle, model: JobModel, job_id: str, guaranteed: bool) -> Option | None:
        """Make room by moving running jobs: release the movable jobs of the
        emptiest nodes one node at a time until the pending job fits, then
        place the released jobs again (as large as before when possible,
        never below their floor). Nothing changes unless all of them find a
        place and, for a best-effort job, it gains more than they lose."""
        pool = cyc.pool
        movable = [x for x in list(cyc.live.values()) + list(cyc.starts.values())
                   if not x.changed and x.movable and x.id != job_id and x.running is not None
                   and x.running.spec.grace_period == 0]
        if not movable:
            return None
        on_node: dict[str, list[Live]] = {}
        for x in movable:
            for n in x.opt.as_dict:
                on_node.setdefault(n, []).append(x)
        fixed = {n: 0 for n in pool.order}
        for r in cyc.snapshot.running:
            if r.spec.id not in {x.id for x in movable}:
                for n, k in r.placement.parts:
                    fixed[n] += k
        order = sorted(on_node, key=lambda n: (fixed[n], sum(x.opt.as_dict[n] for x in on_node[n]), n))
        released: list[Live] = []
        for n in order:
            for x in sorted(on_node[n], key=lambda x: x.id):
                if x not in released:
                    pool.give(x.opt.as_dict, x.model.cpg, x.model.mpg)
                    released.append(x)
            opt = self._start_option(cyc, model, pool, guaranteed)
            if opt is None:
                continue
            pool.take(opt.as_dict, model.cpg, model.mpg)
            moved = self._replace_all(pool, released, shrink=guaranteed)
            if moved is not None:
                lost = sum(x.opt.speed - o.speed for x, o in moved)
                if guaranteed or opt.speed > lost:
                    pool.give(opt.as_dict, model.cpg, model.mpg)
                    for x, o in moved:
                        if o.parts != x.opt.parts or o.plan != x.opt.plan:
                            self._change(cyc, x, o, job_id, Reason.SHRUNK_FOR_JOB)
                    return opt
                for x, o in moved:
                    pool.give(o.as_dict, x.model.cpg, x.model.mpg)
            pool.give(opt.as_dict, model.cpg, model.mpg)
            break
        for x in released:
            pool.take(x.opt.as_dict, x.model.cpg, x.model.mpg)
        return None

    def _preempt_for(self, cyc: _Cycle, model: JobModel, job_id: str) -> None:
        """Preempt best-effort jobs so that a guaranteed job reaches its
        requested throughput: the jobs of the nodes with the least held by
        others first, until it fits; then the ones it can do without (largest
        first) are spared. The job starts once they have vacated."""
        pool = cyc.pool
        victims = [r for r in cyc.snapshot.running
                   if not (r.preempting or r.reconfiguring or r.spec.guaranteed or r.spec.id in cyc.reconfigs
                           or r.spec.id in cyc.preempted)
                   and r.spec.job_class is JobClass.BE and r.preemptions < self.max_preemptions]
        if not victims:
            return
        on_node: dict[str, list[RunningJob]] = {}
        for r in victims:
            for n, _ in r.placement.parts:
                on_node.setdefault(n, []).append(r)
        ids = {r.spec.id for r in victims}
        fixed = {n: 0 for n in pool.order}
        for r in cyc.snapshot.running:
            if r.spec.id not in ids:
                for n, k in r.placement.parts:
                    fixed[n] += k
        taken: list[RunningJob] = []
        fits = False
        for n in sorted(on_node, key=lambda n: (fixed[n], n)):
            for r in sorted(on_node[n], key=lambda r: r.spec.id):
                if r not in taken:
                    _give_running(pool, r)
                    taken.append(r)
            if model.right_size(pool, model.guarantee) is not None:
                fits = True
                break
        if fits:
            for r in sorted(taken, key=lambda r: (-r.spec.num_gpus, r.spec.id)):
                _take_running(pool, r)
                if model.right_size(pool, model.guarantee) is None:
                    _give_running(pool, r)
                else:
                    taken.remove(r)
        for r in taken:
            _take_running(pool, r)  # held until they vacate
            if fits:
                cyc.out.append(Preempt(r.spec.id, job_id, Reason.PREEMPTED_FOR_PRIORITY,
                                       f"preempted so that guaranteed job {job_id} gets its requested throughput"))
                cyc.live.pop(r.spec.id, None)
                cyc.preempted.add(r.spec.id)
        if fits:
            cyc.awaited.add(job_id)

    def _replace_all(self, pool: Pool, released: list[Live], shrink: bool) -> list[tuple[Live, Option]] | None:
        """Place every released job again (largest first, then id), each on
        its current GPU count if it fits, else (``shrink``, for a guaranteed
        job's sake) on fewer down to its floor; a job that fits where it was
        stays there. None, with nothing taken, if one finds no place."""
        placed: list[tuple[Live, Option]] = []
        for x in sorted(released, key=lambda x: (-x.opt.gpus, x.id)):
            o = None
            if pool.fits(x.opt.as_dict, x.model.cpg, x.model.mpg):
                o = x.opt
            else:
                floor = x.opt.gpus if not shrink else self._floor_size(x) if x.guaranteed else x.model.lo
                for g in range(x.opt.gpus, (floor or x.opt.gpus + 1) - 1, -1):
                    cand = x.model.place(pool, g, prefer=x.opt.as_dict)
                    if cand is not None and (not x.guaranteed or cand.speed >= x.model.guarantee - FLOOR_SLACK):
                        o = cand
                        break
            if o is None:
                for y, oy in placed:
                    pool.give(oy.as_dict, y.model.cpg, y.model.mpg)
                return None
            pool.take(o.as_dict, x.model.cpg, x.model.mpg)
            placed.append((x, o))
        return placed

    def _floor_size(self, live: Live) -> int | None:
        """Fewest GPUs (taken from its own) keeping a guaranteed job at 1.0."""
        for g in range(live.model.lo, live.opt.gpus + 1):
            parts = shrink_parts(live.opt.as_dict, live.opt.gpus - g)
            o = live.model.option(parts) if parts else None
            if o is not None and o.speed >= live.model.guarantee - FLOOR_SLACK:
                return g
        return None

    def _cut(self, live: Live, need: int, floor_gpus: int) -> Option | None:
        """The job on fewer GPUs, never below ``floor_gpus`` nor, when
        guaranteed, below its guarantee: ``need`` fewer if it can run so,
        else the fastest option dropping more (a 3D plan runs only on
        certain counts), else the one dropping the most short of ``need``."""
        most = live.opt.gpus - floor_gpus
        best: Option | None = None
        for d in range(need, most + 1):
            o = self._cut_by(live, d)
            if o is not None and (best is None or o.speed > best.speed + FLOOR_SLACK):
                best = o
        if best is not None:
            return best
        for d in range(min(need, most + 1) - 1, 0, -1):
            o = self._cut_by(live, d)
            if o is not None:
                return o
        return None

    def _cut_by(self, live: Live, drop: int) -> Option | None:
        parts = shrink_parts(live.opt.as_dict, drop)
        o = live.model.option(parts) if parts else None
        if o is None or (live.guaranteed and o.speed < live.model.guarantee - FLOOR_SLACK):
            return None
        return o

    @staticmethod
    def _loss_per_gpu(live: Live, floor_gpus: int) -> float:
        parts = shrink_parts(live.opt.as_dict, live.opt.gpus - floor_gpus)
        o = live.model.option(parts) if parts else None
        if o is None:
            return math.inf
        return (live.opt.speed - o.speed) / max(live.opt.gpus - floor_gpus, 1)

    # --- 2. growing and reshaping -------------------------------------------

    def _improve(self, cyc: _Cycle) -> None:
        pool = cyc.pool
        while True:
            best: tuple[tuple, Live, Option] | None = None
            for live in sorted(list(cyc.live.values()) + list(cyc.starts.values()), key=lambda x: x.id):
                if live.changed or not (live.movable or live.fresh):
                    continue
                found = self._best_change(live, pool)
                if found is not None and (best is None or found[0] < best[0]):
                    best = (found[0], live, found[1])
            if best is None:
                return
            _, live, opt = best
            pool.give(live.opt.as_dict, live.model.cpg, live.model.mpg)
            pool.take(opt.as_dict, live.model.cpg, live.model.mpg)
            if live.fresh:
                live.opt = opt  # not yet started: it may grow again in this cycle
            else:
                reason = Reason.GROWN if opt.gpus > live.opt.gpus else Reason.PLAN_CHANGED
                self._change(cyc, live, opt, None, reason)

    def _best_change(self, live: Live, pool: Pool) -> tuple[tuple, Option] | None:
        """The most valuable change of one job that pays for its restart:
        key (needs more GPUs?, -gain per extra GPU, job id)."""
        cur = live.opt
        restart = 0.0 if live.fresh else self.restart_time
        margin = 0.0 if live.fresh else self.min_gain
        own = cur.as_dict
        pool.give(own, live.model.cpg, live.model.mpg)
        try:
            top = min(live.model.hi, pool.gpus)
            best: tuple[tuple, Option] | None = None
            for g in range(live.model.lo, top + 1):
                opt = live.model.place(pool, g, prefer=own)
                if opt is None or opt.speed <= cur.speed + FLOOR_SLACK:
                    continue
                if opt.parts == cur.parts and opt.plan == cur.plan:
                    continue
                if not self._pays(live, opt, restart, margin):
                    continue
                extra = opt.gpus - cur.gpus
                key = (extra > 0, -(opt.speed - cur.speed) / max(extra, 1), live.id)
                if best is None or key < best[0]:
                    best = (key, opt)
            return best
        finally:
            pool.take(own, live.model.cpg, live.model.mpg)

    @staticmethod
    def _pays(live: Live, opt: Option, restart: float, margin: float) -> bool:
        """``R t_now > restart + R t_new`` with a relative margin."""
        if live.remaining == math.inf:
            return opt.seconds < live.opt.seconds * (1.0 - margin)
        now_left = live.remaining * live.opt.seconds
        new_left = restart + live.remaining * opt.seconds
        return new_left < now_left * (1.0 - margin)

    # --- decisions -------------------------------------------------------------

    def _change(self, cyc: _Cycle, live: Live, opt: Option, for_job: str | None, reason: Reason) -> bool:
        """Record a change the caller has made in the pool. True when the
        job keeps what it holds while it checkpoints (a shrink of a job with
        a grace period): the pool then gets its resources back only later."""
        live.opt = opt
        live.changed = True
        if live.fresh:
            return False
        cyc.reconfigs[live.id] = (live, for_job, reason)
        held = live.held
        grace = live.running.spec.grace_period if live.running is not None else 0.0
        if grace > 0 and all(held.get(n, 0) >= k for n, k in opt.as_dict.items()):
            cyc.pool.give(opt.as_dict, live.model.cpg, live.model.mpg)
            cyc.pool.take(held, live.model.cpg, live.model.mpg)
            return True
        return False

    def _emit(self, cyc: _Cycle) -> None:
        for jid in sorted(cyc.reconfigs):
            live, for_job, reason = cyc.reconfigs[jid]
            o = live.opt
            where = placement_of(o.as_dict)
            msg = (f"{reason.value}: plan {o.plan} on {describe_placement(where)}, "
                   f"{o.speed:.2f}x its requested throughput" + (f", making room for {for_job}" if for_job else ""))
            cyc.out.append(Reconfigure(jid, where, o.plan, o.cpus or None, for_job, reason, msg))
        for jid, live in cyc.starts.items():
            o = live.opt
            where = placement_of(o.as_dict)
            cyc.out.append(Start(jid, where, Reason.SCHEDULED,
                                 f"started on {describe_placement(where)} with plan {o.plan}, "
                                 f"{o.speed:.2f}x its requested throughput", plan=o.plan, cpus=o.cpus or None))

    def _pend_message(self, cyc: _Cycle, p: PendingJob) -> str:
        spec = p.spec
        free = cyc.pool.gpus
        if spec.reconfigurable and spec.throughput is not None:
            model = self._model(cyc, spec)
            target = model.right_size(cyc.empty, self.floor(model, spec.guaranteed))
            if target is None:
                return f"no allowed plan reaches {'its requested' if spec.guaranteed else 'any'} throughput on any allocation"
            what = "its requested throughput" if spec.guaranteed else "a runnable plan"
            return (f"needs {gpus_text(target.gpus)} for {what} (plan {target.plan}); {gpus_text(free)} free, "
                    f"and no running job can give up enough now")
        return f"needs {gpus_text(spec.num_gpus)}; {gpus_text(free)} free"


def _give_running(pool: Pool, r: RunningJob) -> None:
    pool.give(dict(r.placement.parts), cpus_per_gpu(r.spec), mem_per_gpu(r.spec))


def _take_running(pool: Pool, r: RunningJob) -> None:
    pool.take(dict(r.placement.parts), cpus_per_gpu(r.spec), mem_per_gpu(r.spec))


def _reason_name(raw: object) -> str:
    for r in Reason:
        if raw in (r, r.value, r.name):
            return r.name
    raise ValueError(f"hold_reason {raw!r} is not a known reason")


__all__ = ["Rubick", "Live"]
