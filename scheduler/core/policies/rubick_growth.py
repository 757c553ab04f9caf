"""Growing and reshaping running jobs in the ``rubick`` policy (``rubick.py``),
and turning a cycle's changes into decisions.

A mixin of ``Rubick``: it uses the policy's ``restart_time`` and ``min_gain``.
"""

from __future__ import annotations

import math

from scheduler.core.decisions import Reason, Reconfigure, Start
from scheduler.core.policies.base import describe_placement
from scheduler.core.policies.reconfig import FLOOR_SLACK, Option, Pool, placement_of
from scheduler.core.policies.rubick_state import Cycle, Live


class Growing:
    """Free GPUs to the running job that gains most (see ``rubick.py``)."""

    def _improve(self, cyc: Cycle) -> None:
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

    def _change(self, cyc: Cycle, live: Live, opt: Option, for_job: str | None, reason: Reason) -> bool:
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

    def _emit(self, cyc: Cycle) -> None:
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
