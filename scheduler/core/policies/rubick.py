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

Modules: this one holds the entry point and admission; ``rubick_reclaim``
making room (shrinking, moving, preempting), ``rubick_growth`` growing and
the decisions a cycle emits, ``rubick_state`` the per-cycle state.
"""

from __future__ import annotations

import math

from scheduler.core.decisions import Decision, Pend, Reason, Start
from scheduler.core.model import JobClass, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import full_free
from scheduler.core.policies.base import DEFAULT_STARVATION_THRESHOLD, check_non_negative, describe_placement, gpus_text
from scheduler.core.policies.reconfig import FLOOR_SLACK, JobModel, Option, Pool, cpus_per_gpu, mem_per_gpu, placement_of
from scheduler.core.policies.rubick_growth import Growing
from scheduler.core.policies.rubick_reclaim import Reclaiming
from scheduler.core.policies.rubick_state import Cycle, EmptySizes, Live

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


class Rubick(Reclaiming, Growing):
    """See the module doc. Parameters (keyword only): ``restart_time`` (s,
    the reconfiguration cost the policy weighs), ``min_interval`` (s between
    two reconfigurations of a job), ``min_gain`` (relative shortening a change
    must bring), ``grow`` (False: admission and reclaiming only),
    ``starvation_threshold`` (s; None: off), ``explain`` (emit Pend)."""

    name = "rubick"
    #: The jobs it resizes: reconfigurable ones (``JobSpec.throughput``); the others run as submitted.
    resizes = "reconfigurable"
    decide_without_pending = True

    def wake_at(self, snapshot: Snapshot, now: float) -> float | None:
        """When a running job that ``min_interval`` holds back may next be reconfigured (the
        simulator then decides again, as the live loop's periodic cycle does); None: no job is."""
        held = [r.last_reconfigure + self.min_interval for r in snapshot.running
                if r.last_reconfigure is not None and now - r.last_reconfigure < self.min_interval - 1e-9]
        return min(held, default=None)

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
        self._sizes = EmptySizes()

    # --- entry point ---------------------------------------------------------

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        cyc = self._cycle(snapshot, now)
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

    def _cycle(self, snapshot: Snapshot, now: float) -> Cycle:
        cyc = Cycle(snapshot, now, Pool.of(snapshot.nodes, snapshot.running, snapshot.free), self.explain)
        cyc.empty = Pool(full_free(snapshot.nodes))
        self._sizes.use_nodes(tuple((n.name, n.gpus, n.cpus, n.mem_gb) for n in snapshot.nodes))
        return cyc

    def queue_order(self, snapshot: Snapshot, now: float) -> list[PendingJob]:
        """Every pending job in the order ``decide`` admits them."""
        return self._queue(self._cycle(snapshot, now))

    def _queue(self, cyc: Cycle) -> list[PendingJob]:
        """The cycle's pending jobs in admission order (``_queue_key``)."""
        return sorted(cyc.snapshot.pending, key=lambda p: self._queue_key(cyc, p))

    def _model(self, cyc: Cycle, spec) -> JobModel:
        model = JobModel(spec)
        self._sizes.fit_ceiling(model, cyc.empty)
        return model

    def _empty_size(self, cyc: Cycle, model: JobModel, floor: float) -> Option | None:
        """The right size judged on the empty cluster (memoized across cycles)."""
        return self._sizes.right_size(model, cyc.empty, floor)

    def _live(self, cyc: Cycle, r: RunningJob) -> Live | None:
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

    def _admit(self, cyc: Cycle) -> bool:
        """Start pending jobs; True when some job is left waiting (nothing
        may grow then: free GPUs are kept for it)."""
        pending = self._queue(cyc)
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

    def _queue_key(self, cyc: Cycle, p: PendingJob) -> tuple:
        """Guaranteed jobs before the others; within each, TE jobs, then jobs
        past the starvation threshold, in arrival order; then the rest, by
        expected work (GPU-seconds at their admission size; ``order="work"``)
        or in arrival order. Within each of those groups a job of higher
        ``priority`` comes first."""
        spec = p.spec
        head = (not spec.guaranteed, spec.job_class is not JobClass.TE)
        starving = self.starvation_threshold is not None and cyc.now - spec.submit_time > self.starvation_threshold
        if spec.job_class is JobClass.TE or starving or self.order == "arrival":
            return (*head, not starving, -spec.priority, 0.0, spec.submit_time, spec.id)
        return (*head, True, -spec.priority, self._work(cyc, p), spec.submit_time, spec.id)

    def _work(self, cyc: Cycle, p: PendingJob) -> float:
        spec = p.spec
        if not (spec.reconfigurable and spec.throughput is not None and spec.steps):
            return math.inf
        model = self._model(cyc, spec)
        target = self._empty_size(cyc, model, self.floor(model, spec.guaranteed))
        if target is None:
            return math.inf
        return max(spec.steps - p.steps_done, 0.0) * target.seconds * target.gpus

    def _admit_one(self, cyc: Cycle, p: PendingJob) -> bool:
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

    def _start_option(self, cyc: Cycle, model: JobModel, pool: Pool, guaranteed: bool) -> Option | None:
        """The right size if it fits; else, for a best-effort job, the fastest
        option that fits, up to the right size on packed nodes, if it reaches
        ``start_floor``."""
        # Each GPU count is placed once: the right-size scan (as
        # ``JobModel.right_size`` on ``pool``) and the best-effort scan after
        # it ask the same placements of the same pool.
        placed: dict[int, Option | None] = {}

        def at(g: int) -> Option | None:
            if g not in placed:
                placed[g] = model.place(pool, g)
            return placed[g]

        floor = self.floor(model, guaranteed)
        opt: Option | None = None
        for g in range(model.lo, model.hi + 1):
            o = at(g)
            if o is not None and o.speed >= floor - FLOOR_SLACK:
                opt = o
                break
            if pool.gpus < g:
                break
        if opt is not None or guaranteed:
            return opt
        packed = self._empty_size(cyc, model, self.floor(model, False))
        cap = packed.gpus if packed is not None else model.hi
        best: Option | None = None
        for g in range(model.lo, min(cap, pool.gpus) + 1):
            o = at(g)
            if (o is not None and o.speed >= min(self.start_floor, model.guarantee) - FLOOR_SLACK
                    and (best is None or o.speed > best.speed + FLOOR_SLACK)):
                best = o
        return best

    def _pend_message(self, cyc: Cycle, p: PendingJob) -> str:
        spec = p.spec
        free = cyc.pool.gpus
        if spec.reconfigurable and spec.throughput is not None:
            model = self._model(cyc, spec)
            target = self._empty_size(cyc, model, self.floor(model, spec.guaranteed))
            if target is None:
                return f"no allowed plan reaches {'its requested' if spec.guaranteed else 'any'} throughput on any allocation"
            what = "its requested throughput" if spec.guaranteed else "a runnable plan"
            return (f"needs {gpus_text(target.gpus)} for {what} (plan {target.plan}); {gpus_text(free)} free, "
                    f"and no running job can give up enough now")
        return f"needs {gpus_text(spec.num_gpus)}; {gpus_text(free)} free"


def _reason_name(raw: object) -> str:
    for r in Reason:
        if raw in (r, r.value, r.name):
            return r.name
    raise ValueError(f"hold_reason {raw!r} is not a known reason")


__all__ = ["Rubick", "Live"]
