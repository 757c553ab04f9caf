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
its grace period and pends again.

Bounded work: the run stops once every asked-for job has started, at
``now + horizon`` of virtual time, or after ``max_batches`` decide calls,
whichever comes first; a job not started by then is forecast ``None`` (later
than the horizon, or never: a held job whose hold the forecast cannot lift).

Fair share: the snapshot's tenant usage is kept as it is at ``now`` for the
whole forecast (the forecast does not age or charge usage).

Pure: no clock, no randomness, no I/O. The input snapshot is never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.core.model import JobClass, PendingJob, RunningJob, Snapshot
from scheduler.core.policy import Policy
from scheduler.core.runtime_estimate import RuntimeEstimate
from scheduler.sim.engine import Simulator
from scheduler.sim.job_state import COMPLETE, PENDING, PREEMPTING, RUNNING, VACATE, LiveRunningJob, SimJobState
from scheduler.sim.records import SimConfig, SimulationError
from scheduler.sim.workloads.types import SimJob

DEFAULT_HORIZON = 14 * 86400.0
"""Virtual seconds a forecast looks ahead; a later start is reported as None."""
DEFAULT_MAX_BATCHES = 50_000
"""Decide calls a forecast may make at most (bounds its CPU time)."""


@dataclass(frozen=True, slots=True)
class ForecastLimits:
    """How far one forecast runs: virtual seconds past ``now`` and decide calls."""

    horizon: float = DEFAULT_HORIZON
    max_batches: int = DEFAULT_MAX_BATCHES


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
                 resume_overhead: float = SimConfig().resume_overhead) -> None:
        super().__init__(policy, snapshot.nodes, [], SimConfig(resume_overhead=resume_overhead))
        self._clock.now = now
        self.now = now
        self.starts: dict[str, float] = {}
        self._waiting: set[str] = set()
        for r in snapshot.running:
            self._load_running(r, now, estimator)
        for p in sorted(snapshot.pending, key=lambda p: (p.spec.submit_time, p.spec.id)):
            self._load_pending(p, estimator)
        self.snapshot.tenants = snapshot.tenants
        self.snapshot.uniform_priority = len({p.spec.priority for p in self.snapshot.pending}) <= 1 or None

    def _register(self, job: SimJobState) -> None:
        if job.spec.id in self._by_id:
            raise ValueError(f"job {job.spec.id!r} appears twice in the snapshot")
        self._by_id[job.spec.id] = job
        self._jobs.append(job)

    def _load_running(self, r: RunningJob, now: float, estimator: RuntimeEstimate) -> None:
        progress = r.progress
        rest = estimator.remaining(r.spec, progress)
        job = SimJobState(SimJob(spec=r.spec, duration=progress + rest))
        self._register(job)
        job.progress = progress
        job.preemptions = r.preemptions
        job.first_start = r.first_start
        live = LiveRunningJob(
            spec=r.spec, placement=r.placement, attempt_start=r.attempt_start, first_start=r.first_start,
            progress=progress, preemptions=r.preemptions, plan=r.plan,
        )
        live._work_from, live._clock, live._rate, live._ref = now, self._clock, 1.0, 0.0
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
            self._push(now + rest, COMPLETE, job)

    def _load_pending(self, p: PendingJob, estimator: RuntimeEstimate) -> None:
        rest = estimator.remaining(p.spec, p.progress)
        job = SimJobState(SimJob(spec=p.spec, duration=p.progress + rest))
        self._register(job)
        job.progress, job.preemptions, job.first_start = p.progress, p.preemptions, p.first_start
        job.state = PENDING
        job.pending = p
        self._enqueue(job)
        self._waiting.add(p.spec.id)

    def _start(self, d, t: float) -> SimJobState:  # type: ignore[no-untyped-def]
        job = super()._start(d, t)
        if job.spec.id in self._waiting:
            self._waiting.discard(job.spec.id)
            self.starts[job.spec.id] = t
        return job

    @property
    def decide_calls(self) -> int:
        """Decide calls made so far."""
        return self._decide_calls

    def forecast(self, targets: Iterable[str] | None = None, limits: ForecastLimits = ForecastLimits()
                 ) -> dict[str, float | None]:
        """Run until every target (default: every pending job) has started or
        a limit is reached; each target's forecast start, None past the limits."""
        wanted = set(self._waiting) if targets is None else set(targets) & self._waiting
        end = self.now + limits.horizon
        events, pending = self._events, self.snapshot.pending
        t = self.now
        batches = 0
        while True:
            if pending:
                self._decide(t)
                batches += 1
            if not wanted - self.starts.keys() or not events or batches >= limits.max_batches:
                break
            t = events[0][0]
            if t > end:
                break
            self._clock.now = t
            self._apply_events(t)
        return {jid: self.starts.get(jid) for jid in wanted}


def forecast_starts(policy: Policy, snapshot: Snapshot, now: float, estimator: RuntimeEstimate,
                    targets: Iterable[str] | None = None, limits: ForecastLimits = ForecastLimits(),
                    resume_overhead: float = SimConfig().resume_overhead) -> dict[str, float | None]:
    """Forecast start time of each target pending job (default: all) of
    ``snapshot`` at ``now`` under ``policy``; see the module docstring.

    Every forecast is ``>= now``. Raises ``ValueError`` for a snapshot that is
    inconsistent (a job twice, a placement over a node's capacity) and
    ``SimulationError`` for a policy bug.
    """
    run = ForecastRun(policy, snapshot, now, estimator, resume_overhead)
    return run.forecast(targets, limits)


def queue_positions(snapshot: Snapshot) -> dict[str, int]:
    """1-based position of each pending job in its class's queue, TE first,
    in the order the queue policies consider them (priority, then arrival)."""
    out: dict[str, int] = {}
    for cls in (JobClass.TE, JobClass.BE):
        queue = [p for p in snapshot.pending if p.spec.job_class is cls]
        queue.sort(key=lambda p: (-p.spec.priority, p.spec.submit_time, p.spec.id))
        out.update({p.spec.id: i for i, p in enumerate(queue, 1)})
    return out


__all__ = ["DEFAULT_HORIZON", "DEFAULT_MAX_BATCHES", "ForecastLimits", "ForecastRun", "SimulationError",
           "forecast_starts", "freeze"]
