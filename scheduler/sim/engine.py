"""Discrete-event simulator: the real policies on a virtual clock.

Events are arrivals, completions and vacates (a preempted job releasing its
resources when its grace period ends). Events at the same timestamp are
applied together, then ``decide(snapshot, now)`` is called once for the batch
and its decisions validated and applied; it is skipped when nothing is
pending (nothing to start, no TE job to preempt for).

Job mechanics:
* ``Start``: the job holds its placement's GPUs (CPUs and memory charged per
  node in proportion to GPUs) until it completes or vacates. An attempt after a
  preemption first spends ``resume_overhead`` seconds restoring its checkpoint
  (no progress), then runs its remaining work.
* ``Preempt``: from the notice the job makes no more progress and keeps its
  resources for its grace period (checkpointing); then it returns to the
  pending queue with the progress it had at the notice. A TE job preempted
  past the TE time limit follows the same mechanics.
* Lost GPU-seconds: GPUs x (time held after a notice + resume overhead spent),
  so that allocated GPU-seconds = useful GPU-seconds + lost GPU-seconds.

The snapshot's ``running``, ``pending`` (arrival order), ``pending_te`` and ``free`` are updated in
place; ``RunningJob.progress`` is computed when read. Invalid decisions (starting a job not pending, a
wrong GPU count, an unknown or over-full node, preempting a job not running) raise ``SimulationError``.

Reconfigurable jobs (a ``SimJob`` with ``speed``, docs/rubick.md): ``duration`` is steps times the
reference iteration time; on another plan or allocation a job progresses at ``reference / iteration
time`` (``scheduler.sim.allocation``). A ``Start`` may give it any GPU count in ``spec.gpu_range`` and a
plan; a ``Reconfigure`` relaunches it (``scheduler.sim.reconfiguration``).

Adaptive jobs (``spec.adaptive``, ``scheduler.sim.adaptive_attempt``): progress at goodput, restart on
every allocation change. ``SimConfig.round_seconds``: decide at round boundaries only. A policy with
``wake_at(snapshot, now)`` is also called at the time that returns (a change it held back becomes allowed),
as the live loop's periodic cycle would call it. See also ``records`` and ``job_state``. Python's cyclic
collector is paused during each ``decide`` call.
"""

from __future__ import annotations

import gc
import heapq
from array import array
from collections.abc import Callable, Sequence

from scheduler.core.decisions import Pend, Preempt, Reconfigure, Start
from scheduler.core.fairshare import UsageLedger
from scheduler.core.metrics import JobOutcome
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Snapshot
from scheduler.core.placement import FreeLedger
from scheduler.core.policy import Policy
from scheduler.sim.adaptive_attempt import AdaptiveRunningJob, finish_time, restart_seconds, vacates_at_once
from scheduler.sim.allocation import IterationTiming, allocation
from scheduler.sim.dependencies import DependencyTracker
from scheduler.sim.job_state import COMPLETE, DONE, PENDING, PREEMPTING, RUNNING, VACATE, WAKE
from scheduler.sim.job_state import LiveRunningJob, SimJobState, VirtualClock, insert_pending, remove_pending
from scheduler.sim.reconfiguration import ReconfigurationMechanics
from scheduler.sim.records import AttemptRecord, PreemptionRecord, SimConfig, SimResult, SimulationError
from scheduler.sim.workloads.types import SimJob

ProgressCallback = Callable[[int, int], None]


class Simulator(ReconfigurationMechanics):
    """One run of one policy over one workload on one cluster."""

    def __init__(self, policy: Policy, nodes: Sequence[NodeCapacity], jobs: Sequence[SimJob],
                 config: SimConfig = SimConfig(), progress: ProgressCallback | None = None) -> None:
        self.policy = policy
        self.config = config
        self.nodes = list(nodes)
        self._node_index = {n.name: i for i, n in enumerate(self.nodes)}
        if len(self._node_index) != len(self.nodes):
            raise ValueError("node names must be unique")
        self._ledger = FreeLedger(self.nodes)
        self.total_gpus = sum(n.gpus for n in self.nodes)
        ordered = sorted(jobs, key=lambda j: (j.spec.submit_time, j.spec.id))
        self._jobs = [SimJobState(j) for j in ordered]
        self._by_id = {j.spec.id: j for j in self._jobs}
        if len(self._by_id) != len(self._jobs):
            raise ValueError("job ids must be unique")
        zero = next((j.spec.id for j in self._jobs if j.spec.num_gpus < 1), None)
        if zero is not None:
            raise ValueError(f"job {zero!r} asks for 0 GPUs; the policies place GPU jobs only")
        # Jobs that wait for others are held pending until those complete (scheduler.sim.dependencies).
        self._deps = DependencyTracker(self._jobs) if any(j.spec.dependencies for j in self._jobs) else None
        self._progress_cb = progress
        self._clock = VirtualClock()
        self._events: list[tuple[float, int, int, SimJobState, int]] = []
        self._seq = 0
        # One priority for the whole workload: the queue needs no priority sort, ever.
        uniform = len({j.spec.priority for j in self._jobs}) <= 1 or None
        self.snapshot = Snapshot(nodes=self.nodes, running=[], pending=[], free=self._ledger.free, pending_te=[],
                                 uniform_priority=uniform)
        self._usage = UsageLedger(config.shares, config.half_life) if config.shares is not None else None
        # Fair share: a started job may be preempted for a tenant below its
        # entitlement once it has run this long; an event then calls decide,
        # which would otherwise wait for the next arrival or completion.
        self._reclaim_after = getattr(policy, "reclaim_min_runtime", None) if self._usage is not None else None
        self._allocated = 0
        self._allocated_gpu_seconds = 0.0
        self._lost_gpu_seconds = 0.0
        self._preemptions: list[PreemptionRecord] = []
        self._attempts: list[AttemptRecord] | None = [] if config.record_attempts else None
        self._util_times = array("d")
        self._util_gpus = array("l")
        self._done = 0
        self._decide_calls = 0
        self._reconfigurations = 0
        self._timing = IterationTiming()
        # A policy that reconfigures running jobs may act with nothing pending
        # (grow jobs into GPUs a completion freed).
        self._decide_idle = bool(getattr(policy, "decide_without_pending", False))
        self._wake_at = getattr(policy, "wake_at", None)  # ReconfigurationMechanics._wake_policy
        self._wakes: set[float] = set()

    # ------------------------------------------------------------------ run

    def run(self) -> SimResult:
        """Simulate until every job has completed; return the result."""
        jobs, n = self._jobs, len(self._jobs)
        events = self._events
        arrival = 0
        batches = 0
        pending = self.snapshot.pending
        step = self.config.round_seconds
        next_round = step or float("inf")
        while arrival < n or events or (step is not None and self._done < n):
            t = events[0][0] if events else jobs[arrival].spec.submit_time if arrival < n else next_round
            if arrival < n and jobs[arrival].spec.submit_time < t:
                t = jobs[arrival].spec.submit_time
            round_now = t >= next_round
            if round_now:
                t = next_round
                next_round += step  # type: ignore[operator]
            self._clock.now = t
            before = self._allocated
            if events and events[0][0] == t:
                self._apply_events(t)
            while arrival < n and jobs[arrival].spec.submit_time == t:
                self._arrive(jobs[arrival])
                arrival += 1
            if (round_now and (pending or self.snapshot.running)) if step is not None else (
                    pending or (self._decide_idle and self.snapshot.running)):
                self._decide(t)
            if self._allocated != before:
                self._util_times.append(t)
                self._util_gpus.append(self._allocated)
            batches += 1
            if self._progress_cb is not None and batches % 1024 == 0:
                self._progress_cb(self._done, n)
            if not events and arrival >= n and pending and (step is None or round_now):
                raise SimulationError(
                    f"stalled at t={t:g}: {len(pending)} job(s) pending, nothing running, no arrivals left "
                    f"(first: {pending[0].spec.id}, {pending[0].spec.num_gpus} GPUs)"
                )
        if self._progress_cb is not None:
            self._progress_cb(self._done, n)
        return self._result()

    # --------------------------------------------------------------- events

    def _apply_events(self, t: float) -> None:
        """Apply every event due at ``t`` (the earliest in the queue)."""
        events = self._events
        while events and events[0][0] == t:
            _, _, kind, job, attempt = heapq.heappop(events)
            if job.attempt != attempt:
                continue  # stale: that attempt was preempted
            if kind == COMPLETE:
                self._complete(job, t)
            elif kind == VACATE:
                self._vacate(job, t)
            elif kind == WAKE:
                pass  # only calls decide: a job became old enough to give GPUs back
            else:
                self._relaunch(job, job.reshape, t, 0.0)

    def _arrive(self, job: SimJobState) -> None:
        job.state = PENDING
        job.pending = PendingJob(spec=job.spec)
        if self._deps is not None:
            self._deps.hold(job)
        self._enqueue(job)

    def _complete(self, job: SimJobState, t: float) -> None:
        r = job.running
        self._release(job, t)
        self._lost_gpu_seconds += r.spec.num_gpus * job.overhead
        job.state = DONE
        job.progress = job.duration
        job.completion = t
        job.running = None
        self._done += 1
        self._log_attempt(job, r, t)
        if self._deps is not None:
            self._deps.completed(job.spec.id)

    def _vacate(self, job: SimJobState, t: float) -> None:
        r = job.running
        self._release(job, t)
        gpus = r.spec.num_gpus
        notice = r.notice_time
        # Time held after the notice, plus the part of the resume overhead the
        # attempt got through before its notice.
        self._lost_gpu_seconds += gpus * ((t - notice) + min(job.overhead, notice - r.attempt_start))
        job.progress = r.progress
        job.state = PENDING
        job.running = None
        job.pending = PendingJob(
            spec=job.spec, progress=job.progress, preemptions=job.preemptions, first_start=job.first_start,
            steps_done=r.steps_done,
        )
        self._enqueue(job)
        self._log_attempt(job, r, t)

    def _release(self, job: SimJobState, t: float) -> None:
        r = job.running
        spec = r.spec
        self._timing.close(job, r, t)
        self._ledger.release(spec, placement=r.placement)
        self._allocated -= spec.num_gpus
        self._charge(spec, -spec.num_gpus, t)
        self._allocated_gpu_seconds += spec.num_gpus * (t - r.attempt_start)
        running = self.snapshot.running
        last = running.pop()
        if last is not r:
            running[r._index] = last
            last._index = r._index

    def _log_attempt(self, job: SimJobState, r: LiveRunningJob, t: float) -> None:
        if self._attempts is not None:
            self._attempts.append(AttemptRecord(job.spec.id, job.spec.job_class, r.placement, r.attempt_start, t,
                                                r.notice_time, r.preempted_for))

    # ------------------------------------------------------------ decisions

    def _decide(self, t: float) -> None:
        self._decide_calls += 1
        if self._usage is not None:
            self.snapshot.tenants = self._usage.state(t)
        # decide() makes many short-lived objects that refcounting frees; collecting at each burst cost a third.
        collecting = gc.isenabled()
        gc.disable()
        try:
            decisions = self.policy.decide(self.snapshot, t)
        finally:
            if collecting:
                gc.enable()
        started: list[SimJobState] = []
        by_id = self._by_id
        # Adaptive jobs preempted without grace free their GPUs first, for this call's other decisions.
        at_once = {d.job_id: d for d in decisions if d.__class__ is Preempt and vacates_at_once(by_id.get(d.job_id), d)}
        for d in at_once.values():
            self._preempt(d, t)
        reconfigures = [d for d in decisions if d.__class__ is Reconfigure]
        if reconfigures:
            self._reconfigure_all(reconfigures, t)
        for d in decisions:
            cls = d.__class__
            if cls is Pend:
                job = by_id.get(d.job_id)
                if job is None or job.state != PENDING:
                    raise SimulationError(f"t={t:g}: Pend for {d.job_id!r}, which is not pending")
            elif cls is Start:
                started.append(self._start(d, t))
            elif cls is Preempt:
                if d.job_id not in at_once:
                    self._preempt(d, t)
            elif cls is Reconfigure:
                pass  # applied above, together
            else:
                raise SimulationError(f"t={t:g}: unknown decision {d!r}")
        if started:
            self._remove_pending(started)
        if self._wake_at is not None:
            self._wake_policy(t)

    def _start(self, d: Start, t: float) -> SimJobState:
        job = self._by_id.get(d.job_id)
        if job is None or job.state != PENDING:
            raise SimulationError(f"t={t:g}: Start for {d.job_id!r}, which is not pending")
        placement = d.placement
        spec = allocation(job, d, t, "Start", self._node_index)
        try:
            self._ledger.hold(spec, placement)
        except ValueError as e:
            raise SimulationError(f"t={t:g}: Start {spec.id} over-allocates: {e}") from None
        plan, rate = self._timing.speed(job, d, spec, t)
        if job.first_start is None:
            job.first_start = t
        job.overhead = restart_seconds(job, self.config.resume_overhead if job.preemptions else 0.0)
        r = (AdaptiveRunningJob if spec.adaptive is not None else LiveRunningJob)(
            spec=spec, placement=placement, attempt_start=t, first_start=job.first_start,
            progress=job.progress, preemptions=job.preemptions, plan=plan,
            reconfigurations=job.reconfigurations, last_reconfigure=job.last_reconfigure,
        )
        r._work_from = t + job.overhead
        r._clock = self._clock
        r._rate = rate
        r._ref = job.speed.reference if job.speed is not None else 0.0
        running = self.snapshot.running
        r._index = len(running)
        running.append(r)
        job.running = r
        job.state = RUNNING
        job.attempt += 1
        self._allocated += spec.num_gpus
        self._charge(spec, spec.num_gpus, t)
        self._push(finish_time(job, r), COMPLETE, job)
        if self._reclaim_after is not None:
            self._push(t + self._reclaim_after, WAKE, job)
        return job

    def _preempt(self, d: Preempt, t: float) -> None:
        job = self._by_id.get(d.job_id)
        if job is None or job.state != RUNNING:
            raise SimulationError(f"t={t:g}: Preempt for {d.job_id!r}, which is not running (or already preempting)")
        r = job.running
        r.notice_time = t  # freezes progress at the notice
        r.preempting = True
        r.preempted_for = d.for_job
        job.preemptions += 1
        r.preemptions = job.preemptions
        job.state = PREEMPTING
        job.attempt += 1  # the pending completion event is now stale
        self._preemptions.append(
            PreemptionRecord(
                t, job.spec.id, job.spec.job_class, d.for_job, t - r.attempt_start, r.progress, job.preemptions
            )
        )
        if vacates_at_once(job, d):
            self._vacate(job, t)
        else:
            self._push(t + job.spec.grace_period, VACATE, job)

    def _enqueue(self, job: SimJobState) -> None:
        """Put the job's PendingJob in ``pending`` (and ``pending_te`` for a TE
        job) at its arrival position."""
        insert_pending(self.snapshot.pending, job.pending)
        if job.spec.job_class is JobClass.TE:
            insert_pending(self.snapshot.pending_te, job.pending)

    def _remove_pending(self, started: list[SimJobState]) -> None:
        snap = self.snapshot
        remove_pending(snap.pending, [j.pending for j in started])
        te = [j.pending for j in started if j.spec.job_class is JobClass.TE]
        if te:
            remove_pending(snap.pending_te, te)
        for job in started:
            job.pending = None

    # -------------------------------------------------------------- helpers

    def _charge(self, spec: JobSpec, gpus: int, t: float) -> None:
        """Fair share: the tenant (and user) of ``spec`` holds ``gpus`` more GPUs from ``t``."""
        if self._usage is not None:
            self._usage.add(spec.tenant, spec.user, gpus, t)

    def _push(self, when: float, kind: int, job: SimJobState) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, job, job.attempt))

    def _result(self) -> SimResult:
        outcomes = [
            JobOutcome(
                job_id=j.spec.id, job_class=j.spec.job_class, num_gpus=j.spec.num_gpus,
                submit_time=j.spec.submit_time, duration=j.duration, first_start=j.first_start,
                completion=j.completion, preemptions=j.preemptions,
            )
            for j in self._jobs
        ]
        return SimResult(
            outcomes=outcomes,
            total_gpus=self.total_gpus,
            allocated_gpu_seconds=self._allocated_gpu_seconds,
            lost_gpu_seconds=self._lost_gpu_seconds,
            preemptions=self._preemptions,
            decide_calls=self._decide_calls,
            util_times=self._util_times,
            util_gpus=self._util_gpus,
            attempts=self._attempts,
            reconfigurations=self._reconfigurations,
            timed_attempts=self._timing.attempts,
            modelled_attempts=self._timing.modelled_attempts,
            timed_seconds=self._timing.seconds,
            modelled_seconds=self._timing.modelled_seconds,
            below_request=frozenset(self._timing.below_request),
        )


def simulate(policy: Policy, nodes: Sequence[NodeCapacity], jobs: Sequence[SimJob], config: SimConfig = SimConfig(),
             progress: ProgressCallback | None = None) -> SimResult:
    """Run ``policy`` over ``jobs`` on ``nodes``; see :class:`Simulator`."""
    return Simulator(policy, nodes, jobs, config, progress).run()
