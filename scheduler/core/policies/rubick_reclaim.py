"""Making room for a pending job in the ``rubick`` policy (``rubick.py``):
shrinking running jobs (``_reclaim``), moving them (``_repack``) and, for
guaranteed jobs when allowed, preempting best-effort ones (``_preempt_for``).

A mixin of ``Rubick``: it uses the policy's parameters and its
``floor``, ``_start_option`` and ``_change``.
"""

from __future__ import annotations

import math

from scheduler.core.decisions import Preempt, Reason
from scheduler.core.model import JobClass, RunningJob
from scheduler.core.policies.reconfig import FLOOR_SLACK, JobModel, Option, Pool, shrink_parts
from scheduler.core.policies.rubick_state import Cycle, Live, give_running, take_running


class Reclaiming:
    """Room for pending jobs (see the module doc)."""

    def _reclaim(self, cyc: Cycle, model: JobModel, job_id: str, guaranteed: bool) -> Option | None:
        """Shrink running jobs until the pending job fits (see the module doc);
        nothing is changed when it does not."""
        pool = cyc.pool
        target = self._empty_size(cyc, model, self.floor(model, guaranteed))
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
                least = self._empty_size(cyc, live.model, min(self.start_floor, live.model.guarantee))
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

    def _repack(self, cyc: Cycle, model: JobModel, job_id: str, guaranteed: bool) -> Option | None:
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

    def _preempt_for(self, cyc: Cycle, model: JobModel, job_id: str) -> None:
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
                    give_running(pool, r)
                    taken.append(r)
            if model.right_size(pool, model.guarantee) is not None:
                fits = True
                break
        if fits:
            for r in sorted(taken, key=lambda r: (-r.spec.num_gpus, r.spec.id)):
                take_running(pool, r)
                if model.right_size(pool, model.guarantee) is None:
                    give_running(pool, r)
                else:
                    taken.remove(r)
        for r in taken:
            take_running(pool, r)  # held until they vacate
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
