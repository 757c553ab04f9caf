"""Start-time forecasts: the simulator's engine run forward from a snapshot.

``forecast_starts(policy, snapshot, now, estimator)`` answers, for every pending
job of ``snapshot``, when the same policy would start it if nothing else were
submitted: it loads the snapshot into a fresh :class:`Simulator` on a virtual
clock set to ``now`` (running jobs hold their placements; pending jobs keep
their queue order, progress, preemptions and hold reasons) and runs the event
loop, calling ``policy.decide`` exactly as the simulator and the live loop do.
Run times are unknown, so each job's remaining time comes from
``scheduler.core.runtime_estimate`` (its owner's history of similar jobs,
capped by its time limit). A job preempting at ``now`` vacates at the end of
its grace period and pends again. A job held by a dependency is released when
the jobs it awaits complete in the run (every job succeeds in a forecast, so
only an ``afternotok`` wait keeps it held to the end). An array task held by
its array's ``%N`` is released when a task of the array ends or is preempted
in the run, in queue order, so that at most N hold GPUs.

Bounded work: the run stops once every asked-for job has started, at
``now + horizon`` of virtual time, or after ``max_batches`` decide calls,
whichever comes first; a job not started by then is forecast ``None`` (later
than the horizon, or never: a held job whose hold the forecast cannot lift).

Fair share: the snapshot's tenant usage is kept as it is at ``now`` for the
whole forecast (the forecast does not age or charge usage).

Several futures: each job's run time is one draw from its owner's history
(``scheduler.core.runtime_estimate``), so one run is one possible future and
its starts are as spread as the futures are. With ``draws`` = K > 1 the run is
made K times, with the sets of draws 0 to K - 1 (``with_draw``), and a job's
forecast is the median of its K starts (``median_starts``): the point that
errs least in absolute terms over the futures the history allows. K = 1 is one
run with the estimator as given.

Pure: no clock, no randomness, no I/O. The input snapshot is never mutated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from scheduler.core.arrays import limit_message, throttled
from scheduler.core.decisions import Reason
from scheduler.core.dependencies import Outcome, awaited
from scheduler.core.model import PendingJob, RunningJob, Snapshot
from scheduler.core.policy import Policy
from scheduler.core.runtime_estimate import RuntimeEstimate, with_draw
from scheduler.sim.dependencies import DependencyTracker
from scheduler.sim.adaptive_attempt import AdaptiveRunningJob, finish_time, shape_of
from scheduler.sim.engine import Simulator
from scheduler.sim.forecast_speed import believed_speed
from scheduler.sim.job_state import COMPLETE, PENDING, PREEMPTING, RUNNING, VACATE, LiveRunningJob, SimJobState
from scheduler.sim.records import SimConfig, SimulationError
from scheduler.sim.workloads.types import SimJob

DEFAULT_HORIZON = 14 * 86400.0
"""Virtual seconds a forecast looks ahead; a later start is reported as None."""
DEFAULT_MAX_BATCHES = 50_000
"""Decide calls a forecast may make at most (bounds its CPU time)."""


@dataclass(frozen=True, slots=True)
class ForecastLimits:
    """How far one forecast runs (virtual seconds past ``now``, decide calls) and
    how finely it looks: a completion or vacate ``d`` seconds after ``now`` is
    moved up to the next multiple of ``max(step, 2^floor(log2 d) * relative_step)``
    seconds, so that events close together are applied in one batch and the
    policy decides once for them. With the defaults an event moves by at most a
    minute or 1/16 of its lead (6 %), well inside the 25 % a forecast is judged
    by, and a forecast makes at most about 16 decide calls per doubling of the
    lead instead of one per event. ``step = 0``: exact times. Measured
    (docs/results.md): the grid is what brings 10,000 pending jobs from 14 s
    to about 3 s."""

    horizon: float = DEFAULT_HORIZON
    max_batches: int = DEFAULT_MAX_BATCHES
    step: float = 60.0
    relative_step: float = 1 / 16
    exact_within: float = 1800.0
    """Events less than this many seconds after ``now`` keep their exact time:
    the short waits, judged by the 5-minute floor, hang on them."""


def freeze(snapshot: Snapshot) -> Snapshot:
    """A copy of ``snapshot`` that later changes to it do not reach: plain
    ``RunningJob`` objects with their progress read now, new lists, the same
    (immutable) specs and placements."""
    running = [
        RunningJob(
            spec=r.spec, placement=r.placement, attempt_start=r.attempt_start, first_start=r.first_start,
            progress=r.progress, preemptions=r.preemptions, preempting=r.preempting,
            preempted_for=r.preempted_for, notice_time=r.notice_time, plan=r.plan,
        )
        for r in snapshot.running
    ]
    pending = [
        PendingJob(spec=p.spec, progress=p.progress, preemptions=p.preemptions, first_start=p.first_start,
                   hold_reason=p.hold_reason, hold_message=p.hold_message, steps_done=p.steps_done)
        for p in snapshot.pending
    ]
    return Snapshot(nodes=list(snapshot.nodes), running=running, pending=pending, tenants=snapshot.tenants)


class ForecastRun(Simulator):
    """A simulator loaded with a snapshot's running and pending jobs at ``now``."""

    def __init__(self, policy: Policy, snapshot: Snapshot, now: float, estimator: RuntimeEstimate,
                 resume_overhead: float = SimConfig().resume_overhead, limits: ForecastLimits = ForecastLimits()
                 ) -> None:
        super().__init__(policy, snapshot.nodes, [], SimConfig(resume_overhead=resume_overhead))
        self._clock.now = now
        self.now = now
        self.limits = limits
        self.starts: dict[str, float] = {}
        self._waiting: set[str] = set()
        self._wanted: set[str] = set()
        self._missing = 0
        for r in snapshot.running:
            self._load_running(r, now, estimator)
        for p in sorted(snapshot.pending, key=lambda p: (p.spec.submit_time, p.spec.id)):
            self._load_pending(p, estimator)
        self._follow_dependencies()
        self._array_tasks: dict[str, list[SimJobState]] = {}
        for j in self._jobs:
            if j.spec.array_limit:
                self._array_tasks.setdefault(j.spec.array_id, []).append(j)
        self.snapshot.tenants = snapshot.tenants
        self.snapshot.uniform_priority = len({p.spec.priority for p in self.snapshot.pending}) <= 1 or None

    def _follow_dependencies(self) -> None:
        """Release Dependency-held jobs as the jobs they await complete in the run
        (``scheduler.sim.dependencies``). A job named but not in the run has ended, and in a
        forecast every job succeeds; a job still awaiting an ``afternotok`` stays held."""
        in_run = {jid: Outcome.WAITING for jid in self._by_id}
        for job in self._jobs:
            if not job.spec.dependencies:
                continue
            left = awaited(job.spec.dependencies, in_run) if job.state == PENDING else ()
            job.spec = replace(job.spec, dependencies=left or ())
            if left == () and job.pending is not None and job.pending.hold_reason == Reason.DEPENDENCY.value:
                job.pending.hold_reason, job.pending.hold_message = None, ""
        if any(j.spec.dependencies for j in self._jobs):
            self._deps = DependencyTracker(self._jobs)

    def _complete(self, job: SimJobState, t: float) -> None:
        super()._complete(job, t)
        self._rethrottle(job)

    def _vacate(self, job: SimJobState, t: float) -> None:
        super()._vacate(job, t)
        self._rethrottle(job)

    def _rethrottle(self, job: SimJobState) -> None:
        """A task of an array with ``%N`` freed its place: hold exactly the array's pending tasks past
        the limit again (``scheduler.core.arrays.throttled``, in queue order), release the others."""
        array = job.spec.array_id
        tasks = self._array_tasks.get(array) if array else None
        if not tasks:
            return
        running = sum(1 for j in tasks if j.state in (RUNNING, PREEMPTING))
        waiting = [j for j in tasks if j.state == PENDING and j.pending is not None
                   and j.pending.hold_reason in (None, Reason.JOB_ARRAY_TASK_LIMIT.value)]
        waiting.sort(key=lambda j: (j.spec.submit_time, len(j.spec.id), j.spec.id))  # ids of one length sort as numbers
        held = throttled([(j.spec.id, 0, j.spec.array_limit) for j in waiting], {0: running})
        for j in waiting:
            limited = j.spec.id in held
            j.pending.hold_reason = Reason.JOB_ARRAY_TASK_LIMIT.value if limited else None
            j.pending.hold_message = limit_message(array, j.spec.array_limit) if limited else ""

    def _register(self, job: SimJobState) -> None:
        if job.spec.id in self._by_id:
            raise ValueError(f"job {job.spec.id!r} appears twice in the snapshot")
        self._by_id[job.spec.id] = job
        self._jobs.append(job)

    def _load_running(self, r: RunningJob, now: float, estimator: RuntimeEstimate) -> None:
        progress = r.progress
        rest = estimator.remaining(r.spec, progress)
        job = SimJobState(SimJob(spec=r.spec, duration=progress + rest, speed=believed_speed(r.spec)))
        self._register(job)
        job.progress = progress
        job.preemptions = r.preemptions
        job.first_start = r.first_start
        model = r.spec.adaptive
        live = (AdaptiveRunningJob if model is not None else LiveRunningJob)(
            spec=r.spec, placement=r.placement, attempt_start=r.attempt_start, first_start=r.first_start,
            progress=progress, preemptions=r.preemptions, plan=r.plan,
        )
        live._work_from, live._clock, live._rate, live._ref = now, self._clock, 1.0, 0.0
        if model is not None:
            # As the engine runs an adaptive attempt: progress by the model's goodput on the placement's
            # shape, none before its restart is over; it completes when the model says, not by estimate.
            live._shape = shape_of(live)
            live._work_from = max(now, r.attempt_start + model.restart_seconds)
        try:
            self._ledger.hold(r.spec, r.placement)
        except ValueError as e:
            raise ValueError(f"running job {r.spec.id!r} does not fit its placement: {e}") from None
        live._index = len(self.snapshot.running)
        self.snapshot.running.append(live)
        self._allocated += r.spec.num_gpus
        job.running = live
        job.attempt = 1
        if r.preempting:
            live.notice_time = r.notice_time if r.notice_time is not None else now
            live.preempting, live.preempted_for = True, r.preempted_for
            job.state = PREEMPTING
            self._push(max(now, live.notice_time + r.spec.grace_period), VACATE, job)
        else:
            job.state = RUNNING
            self._push(finish_time(job, live) if model is not None else now + rest, COMPLETE, job)

    def _load_pending(self, p: PendingJob, estimator: RuntimeEstimate) -> None:
        rest = estimator.remaining(p.spec, p.progress)
        job = SimJobState(SimJob(spec=p.spec, duration=p.progress + rest, speed=believed_speed(p.spec)))
        self._register(job)
        job.progress, job.preemptions, job.first_start = p.progress, p.preemptions, p.first_start
        job.state = PENDING
        job.pending = replace(p)  # the run releases holds on its own copy, never on the caller's snapshot
        self._enqueue(job)
        self._waiting.add(p.spec.id)

    def _start(self, d, t: float) -> SimJobState:  # type: ignore[no-untyped-def]
        job = super()._start(d, t)
        jid = job.spec.id
        if jid in self._waiting:
            self._waiting.discard(jid)
            self.starts[jid] = t
            if jid in self._wanted:
                self._missing -= 1
        return job

    def _push(self, when: float, kind: int, job: SimJobState) -> None:
        """Queue the event at its time moved up to the forecast's grid (see ``ForecastLimits``)."""
        lead = when - self.now
        step = self.limits.step
        if step > 0 and lead >= self.limits.exact_within:
            unit = max(step, 2.0 ** math.floor(math.log2(lead)) * self.limits.relative_step)
            when = self.now + math.ceil(lead / unit) * unit
        super()._push(when, kind, job)

    @property
    def decide_calls(self) -> int:
        """Decide calls made so far."""
        return self._decide_calls

    def forecast(self, targets: Iterable[str] | None = None) -> dict[str, float | None]:
        """Run until every target (default: every pending job) has started or
        a limit is reached; each target's forecast start, None past the limits."""
        limits = self.limits
        wanted = self._wanted = set(self._waiting) if targets is None else set(targets) & self._waiting
        self._missing = len(wanted)
        end = self.now + limits.horizon
        events, pending = self._events, self.snapshot.pending
        t = self.now
        batches = 0
        while True:
            if pending:
                self._decide(t)
                batches += 1
            if not self._missing or not events or batches >= limits.max_batches:
                break
            t = events[0][0]
            if t > end:
                break
            self._clock.now = t
            self._apply_events(t)
        return {jid: self.starts.get(jid) for jid in wanted}


def forecast_starts(policy: Policy, snapshot: Snapshot, now: float, estimator: RuntimeEstimate,
                    targets: Iterable[str] | None = None, limits: ForecastLimits = ForecastLimits(),
                    resume_overhead: float = SimConfig().resume_overhead, draws: int = 1,
                    ) -> dict[str, float | None]:
    """Forecast start time of each target pending job (default: all) of
    ``snapshot`` at ``now`` under ``policy``; see the module docstring. With
    ``draws`` > 1, each job's median start over that many runs, each with its
    own set of run-time draws (``draws`` must be odd, so that a median is one of them).

    Every forecast is ``>= now``. Raises ``ValueError`` for a snapshot that is
    inconsistent (a job twice, a placement over a node's capacity) or an even
    ``draws``, and ``SimulationError`` for a policy bug.
    """
    if draws < 1 or draws % 2 == 0:
        raise ValueError(f"draws must be an odd number >= 1, got {draws}")
    targets = None if targets is None else list(targets)
    estimators = [estimator] if draws == 1 else [with_draw(estimator, k) for k in range(draws)]
    runs = [ForecastRun(policy, snapshot, now, e, resume_overhead, limits).forecast(targets) for e in estimators]
    return runs[0] if draws == 1 else median_starts(runs)


def median_starts(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Each job's median forecast over ``runs`` (an odd number of forecasts of the same jobs); a
    start past the limits (None) counts as later than any, so the median is None when more than
    half the runs found none."""
    if not runs or len(runs) % 2 == 0:
        raise ValueError(f"need an odd number of runs, got {len(runs)}")
    middle = len(runs) // 2
    out: dict[str, float | None] = {}
    for jid in runs[0]:
        starts = sorted(math.inf if (t := run.get(jid)) is None else t for run in runs)
        out[jid] = None if starts[middle] == math.inf else starts[middle]
    return out


__all__ = ["DEFAULT_HORIZON", "DEFAULT_MAX_BATCHES", "ForecastLimits", "ForecastRun", "SimulationError",
           "forecast_starts", "freeze", "median_starts"]
