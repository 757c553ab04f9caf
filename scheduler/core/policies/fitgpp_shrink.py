"""``fitgpp-shrink``: FitGpp where shrinking a reconfigurable best-effort job
is a candidate next to preempting one (issue 6, item 5).

When a TE job does not fit, two ways to make room are priced in *lost work*:
the GPU-seconds a best-effort job's current allocation would need to redo
the progress it loses while the TE job holds the GPUs, ``te_hold`` seconds
(a TE job's run time is unknown; this is the expectation the policy plans
with), the unit FitGpp's own loss term uses:

* preempting FitGpp's victim set: each victim stops for its grace period,
  waits while the TE job runs, and restores (``resume_overhead``)::

      sum over victims of  g_v (grace_v + te_hold + resume_overhead)

* shrinking one reconfigurable job on ``g`` GPUs, running at ``s`` of its
  requested throughput, by the GPUs missing on the TE job's node (its best
  plan on what is left runs at ``s'``): it checkpoints, relaunches
  (``restart_time``), runs slower while the TE job holds the GPUs, and later
  checkpoints and relaunches once more to grow back::

      g (grace + (s' restart_time + (s - s') te_hold) / s + grace + restart_time)

The cheaper wins (ties: preemption, the paper's mechanism). A shrink is a
candidate only when its job's grace period is no longer than the wait the
preemption would cause, so the TE job never waits longer for it. A shrunk job grows back to its requested throughput on
its own nodes once no TE job is waiting, at most once per ``min_interval``
and only when that pays for the restart. Everything else is FitGpp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduler.core.decisions import Reason, Reconfigure
from scheduler.core.model import JobClass, PendingJob, Placement, RunningJob
from scheduler.core.placement import per_unit, units_of
from scheduler.core.policies.base import Cycle, StarvationGuard, check_non_negative, describe_placement
from scheduler.core.policies.fitgpp import FitGpp
from scheduler.core.policies.reconfig import FLOOR_SLACK, JobModel, Option, Pool, shrink_parts
from scheduler.core.victims import PreemptionPlan

DEFAULT_TE_HOLD = 600.0
"""Seconds a TE job is expected to hold its GPUs (the median TE run of the
synthetic workload; the TE time limit bounds it)."""
DEFAULT_RESTART_TIME = 60.0
DEFAULT_MIN_INTERVAL = 600.0


@dataclass(frozen=True, slots=True)
class Shrink:
    """Make room on ``node`` by running ``job`` on ``option`` instead."""

    lost: float
    job: RunningJob
    option: Option
    node: str
    freed: int


class FitGppShrink(FitGpp):
    """See the module doc. Parameters besides FitGpp's: ``te_hold`` (s),
    ``restart_time`` (s, filled in by the simulator from its reconfiguration
    overhead), ``min_interval`` (s between two reconfigurations of a job)."""

    name = "fitgpp-shrink"
    #: The jobs it resizes: reconfigurable ones (``JobSpec.throughput``); the others run as submitted.
    resizes = "reconfigurable"
    decide_without_pending = True

    def __init__(self, *, te_hold: float = DEFAULT_TE_HOLD, restart_time: float = DEFAULT_RESTART_TIME,
                 min_interval: float = DEFAULT_MIN_INTERVAL, **params: object) -> None:
        super().__init__(**params)  # type: ignore[arg-type]
        for pname, value in (("te_hold", te_hold), ("restart_time", restart_time), ("min_interval", min_interval)):
            check_non_negative(pname, value)
        self.te_hold = float(te_hold)
        self.restart_time = float(restart_time)
        self.min_interval = float(min_interval)

    # --- the cycle ------------------------------------------------------------

    def decide(self, snapshot, now):
        if not snapshot.pending and not self._shrunk(snapshot.running, now):
            return []
        return super().decide(snapshot, now)

    def be_pass(self, cyc: Cycle, queue, skip, guard) -> None:
        te_waiting = any(p.hold_reason is None for p in cyc.te_queue) if cyc.te_queue else False
        if not te_waiting:
            self._grow_back(cyc)
        super().be_pass(cyc, queue, skip, guard)

    def _get_planner(self, cyc: Cycle):
        planner = super()._get_planner(cyc)
        # A job checkpointing for a reconfiguration cannot be preempted.
        planner.index.chosen.update(r.spec.id for r in cyc.snapshot.running if r.reconfiguring)
        return planner

    # --- TE jobs that do not fit --------------------------------------------------

    def te_no_fit(self, cyc: Cycle, job: PendingJob, guard: StarvationGuard | None) -> None:
        spec = job.spec
        if any(r.reconfiguring and r.reconfigured_for == spec.id for r in cyc.snapshot.running):
            if cyc.explain:
                cyc.pend(job, Reason.WAITING_FOR_PREEMPTION, "waiting for a job to shrink and free its GPUs")
            return
        planner = self._get_planner(cyc)
        plan = planner.plan(job, cyc.now, guard.avoid if guard is not None else None)
        if plan is not None and not plan.victims:
            return super().te_no_fit(cyc, job, guard)  # resources are already vacating for it
        # The TE job must not wait longer than preempting would make it.
        wait = max(plan.until - cyc.now, 0.0) if plan is not None else math.inf
        shrink = self._shrink_plan(cyc, job, wait)
        if shrink is None or (plan is not None and self._preempt_loss(plan) <= shrink.lost):
            return super().te_no_fit(cyc, job, guard)
        self._apply_shrink(cyc, job, shrink)

    def _preempt_loss(self, plan: PreemptionPlan) -> float:
        return sum(v.gpus * (v.grace + self.te_hold + self.resume_overhead) for v in plan.victims)

    def _shrink_loss(self, gpus: int, grace: float, before: float, after: float) -> float:
        redo = (after * self.restart_time + (before - after) * self.te_hold) / before
        return gpus * (grace + redo + grace + self.restart_time)

    def _shrink_plan(self, cyc: Cycle, job: PendingJob, max_wait: float) -> Shrink | None:
        """The cheapest single shrink that lets ``job`` start on one node
        within ``max_wait`` seconds (the donor's grace period)."""
        spec = job.spec
        need = spec.num_gpus
        cpg, mpg = per_unit(spec)
        cap = cyc.cap
        best: Shrink | None = None
        chosen = cyc.planner.index.chosen if cyc.planner is not None else set()  # type: ignore[attr-defined]
        for r in cyc.snapshot.running:
            if not self._may_shrink(r, cyc.now) or r.spec.id in chosen or r.spec.id in self._changed(cyc):
                continue
            if r.spec.grace_period > max_wait + 1e-9:
                continue
            model = JobModel(r.spec)
            parts = dict(r.placement.parts)
            before = model.speed_of(r.plan, parts, r.spec.num_cpus)
            if before is None:
                continue
            rcpg, rmpg = per_unit(r.spec)
            for node, held in sorted(parts.items()):
                free_g = max(cap.gpus[node], 0)
                missing = need - free_g
                if missing <= 0 or missing > held:
                    continue
                freed_units = units_of(free_g + missing, cap.cpus(node) + missing * rcpg,
                                       cap.mem(node) + missing * rmpg, cpg, mpg)
                if freed_units < need:
                    continue
                left = shrink_parts(parts, missing, on=node)
                option = model.option(left) if left else None
                if option is None or (r.spec.guaranteed and option.speed < model.guarantee - FLOOR_SLACK):
                    continue
                lost = self._shrink_loss(r.spec.num_gpus, r.spec.grace_period, before, option.speed)
                key = (lost, r.spec.id, node)
                if best is None or key < (best.lost, best.job.spec.id, best.node):
                    best = Shrink(lost, r, option, node, missing)
        return best

    def _apply_shrink(self, cyc: Cycle, job: PendingJob, s: Shrink) -> None:
        r = s.job
        rcpg, rmpg = per_unit(r.spec)
        where = Placement.of(s.option.as_dict)
        cyc.out.append(Reconfigure(
            r.spec.id, where, s.option.plan, s.option.cpus or None, job.spec.id, Reason.SHRUNK_FOR_JOB,
            f"shrunk for TE job {job.spec.id}: plan {s.option.plan} on {describe_placement(where)} "
            f"({s.option.speed:.2f}x its requested throughput); lost work {s.lost:.0f} s, less than preempting",
        ))
        if cyc.planner is not None:
            cyc.planner.index.chosen.add(r.spec.id)  # type: ignore[attr-defined]
        if r.spec.grace_period > 0:
            if cyc.explain:
                cyc.pend(job, Reason.WAITING_FOR_PREEMPTION,
                         f"waiting for job {r.spec.id} to checkpoint and shrink off {s.node}")
            return
        # Applied before this call's Starts: the GPUs are free at once.
        cyc.cap.claim(s.node, -s.freed, -s.freed * rcpg, -s.freed * rmpg)
        placement = cyc.cap.place(job.spec)
        if placement is not None:
            cyc.start(job, placement)

    # --- helpers ---------------------------------------------------------------------

    def _may_shrink(self, r: RunningJob, now: float) -> bool:
        spec = r.spec
        return (spec.job_class is JobClass.BE and spec.reconfigurable and bool(r.plan)
                and not (r.preempting or r.reconfiguring)
                and (r.last_reconfigure is None or now - r.last_reconfigure >= self.min_interval - 1e-9))

    @staticmethod
    def _changed(cyc: Cycle) -> set[str]:
        """Jobs already reconfigured in this call."""
        return {d.job_id for d in cyc.out if isinstance(d, Reconfigure)}

    def _shrunk(self, running, now: float) -> bool:
        return any(self._grows_back(r, now) for r in running)

    def _grows_back(self, r: RunningJob, now: float) -> bool:
        """A job this policy shrank, still below its requested throughput."""
        return r.reconfigurations > 0 and self._may_shrink(r, now) and self._below_request(r)

    @staticmethod
    def _below_request(r: RunningJob) -> bool:
        s = JobModel(r.spec).speed_of(r.plan, dict(r.placement.parts), r.spec.num_cpus)
        return s is not None and s < 1.0 - FLOOR_SLACK

    def _grow_back(self, cyc: Cycle) -> None:
        """Jobs shrunk earlier and still below their requested throughput get
        it back on their own nodes (plus free GPUs) when that pays for the
        restart."""
        cap = cyc.cap
        for r in sorted(cyc.snapshot.running, key=lambda r: r.spec.id):
            if r.spec.id in self._changed(cyc) or not self._grows_back(r, cyc.now):
                continue
            model = JobModel(r.spec)
            own = dict(r.placement.parts)
            pool = Pool({n: (cap.gpus[n], cap.cpus(n), cap.mem(n)) for n in cap.gpus})
            pool.give(own, model.cpg, model.mpg)
            target = model.right_size(pool, 1.0, prefer=own)
            if target is None:
                continue
            now_s = model.speed_of(r.plan, own, r.spec.num_cpus)
            left = max(r.spec.steps - r.steps_done, 0.0) if r.spec.steps else math.inf
            t_now, t_new = model.ref / now_s, target.seconds
            if not (left == math.inf or self.restart_time + left * t_new < left * t_now):
                continue
            new = target.as_dict
            # A job with a grace period that only gives GPUs up keeps them
            # until its checkpoint ends (see the simulator): nothing is freed now.
            delayed = r.spec.grace_period > 0 and all(own.get(n, 0) >= k for n, k in new.items())
            for n in set(own) | set(new):
                d = new.get(n, 0) - own.get(n, 0)
                if d > 0 or (d < 0 and not delayed):
                    cap.claim(n, d, d * model.cpg, d * model.mpg)
            where = Placement.of(new)
            cyc.out.append(Reconfigure(r.spec.id, where, target.plan, target.cpus or None, None, Reason.GROWN,
                                       f"back to its requested throughput: plan {target.plan} on "
                                       f"{describe_placement(where)}"))
