"""Discrete-event simulator: the real policies on a virtual clock.

Events are arrivals, completions and vacates (a preempted job releasing its
resources when its grace period ends). Events at the same timestamp are
applied together, then the policy's ``decide(snapshot, now)`` is called once for
the batch, and its decisions are validated and applied. ``decide`` is skipped
when nothing is pending: without a pending job a policy has nothing to start
and no TE job to preempt for.

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

The snapshot is maintained incrementally: one ``Snapshot`` whose ``running`` and
``pending`` lists are updated in place between calls (``pending`` kept in
arrival order by binary search), and so are ``pending_te`` (the TE jobs of
``pending``, same objects, same order) and ``free`` (per-node free capacity,
kept by the core's ``FreeLedger``). ``RunningJob.progress`` of a running job is
computed when read, from the virtual clock, so it is always the work done at
``now`` without touching every running job at every event.

Decisions are validated: starting a job that is not pending, a placement with
the wrong GPU count, an unknown or over-full node, preempting a job that is not
running (or already preempting) raise ``SimulationError``: a policy bug.

Reconfigurable jobs (a ``SimJob`` with ``speed``, see docs/rubick.md): work is
counted in iterations. ``duration`` is the job's steps times its reference
iteration time, and a job running with another plan or allocation progresses
at ``reference / iteration time`` seconds of work per second. A ``Start`` may
give such a job any GPU count in ``spec.gpu_range`` and a plan; a
``Reconfigure`` stops it (progress frozen), lets it checkpoint for its grace
period (holding its current resources when the new placement only gives some
up; otherwise the new placement is held at once) and relaunches it, after
``reconfigure_overhead`` seconds without progress, on the new placement. The
running job's ``spec`` then carries the allocation (GPUs, CPUs, memory).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.decisions import Pend, Preempt, Reconfigure, Start
from scheduler.core.fairshare import DEFAULT_HALF_LIFE, UsageLedger
from scheduler.core.metrics import JobOutcome
from scheduler.core.model import JobClass, JobSpec, Node, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.placement import FreeLedger, node_charges
from scheduler.core.policy import Policy
from scheduler.sim.workloads.types import SimJob

# Job states.
_FUTURE, _PENDING, _RUNNING, _PREEMPTING, _DONE, _RESHAPING = range(6)
# Event kinds (their order breaks ties between events at one timestamp; any
# order would do since decide() runs only after the whole batch).
_COMPLETE, _VACATE, _RESHAPE, _WAKE = 0, 1, 2, 3

ProgressCallback = Callable[[int, int], None]


class SimulationError(RuntimeError):
    """A policy returned an infeasible or inconsistent decision, or stalled."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Simulator parameters.

    ``resume_overhead``: seconds a job spends restoring its checkpoint when it
    restarts after a preemption. ``record_attempts``: keep a log of every
    attempt (for tests and analysis; costs memory linear in attempts).
    """

    resume_overhead: float = 60.0
    record_attempts: bool = False
    reconfigure_overhead: float = 60.0
    """Seconds a reconfigured job spends relaunching (no progress) after its checkpoint."""
    shares: Mapping[str, float] | None = None
    """Fair share on: configured share per tenant (tenants not listed get
    the default share); the simulator keeps each tenant's decayed usage on
    its clock and passes it to the policy as ``Snapshot.tenants``. None: off."""
    half_life: float = DEFAULT_HALF_LIFE
    """Seconds after which fair-share usage counts half."""

    def __post_init__(self) -> None:
        if not self.resume_overhead >= 0:
            raise ValueError(f"resume_overhead must be >= 0, got {self.resume_overhead}")
        if not self.reconfigure_overhead >= 0:
            raise ValueError(f"reconfigure_overhead must be >= 0, got {self.reconfigure_overhead}")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One run of a job: ``end`` is completion or vacate; ``notice`` the
    preemption notice (None for an attempt that completed)."""

    job_id: str
    job_class: JobClass
    placement: Placement
    start: float
    end: float
    notice: float | None
    preempted_for: str | None


@dataclass(frozen=True, slots=True)
class PreemptionRecord:
    """A preemption notice: when, whom, for whom, how long the attempt had run
    and how much work the job had done (all attempts) at the notice."""

    time: float
    job_id: str
    job_class: JobClass
    for_job: str | None
    attempt_runtime: float
    progress: float
    count: int  # the job's preemptions including this one


@dataclass
class SimResult:
    """Everything a run produced; metrics are derived from it."""

    outcomes: list[JobOutcome]
    total_gpus: int
    allocated_gpu_seconds: float
    lost_gpu_seconds: float
    preemptions: list[PreemptionRecord]
    decide_calls: int
    # Allocated GPUs as a step function: util_gpus[i] from util_times[i] on.
    util_times: array = field(default_factory=lambda: array("d"))
    util_gpus: array = field(default_factory=lambda: array("l"))
    attempts: list[Attempt] | None = None
    # Reconfigurable jobs: Reconfigure decisions applied, and how often (and
    # for how many seconds of attempts) an iteration time came from the
    # performance model because that plan and placement were not measured.
    reconfigurations: int = 0
    timed_attempts: int = 0
    modelled_attempts: int = 0
    timed_seconds: float = 0.0
    modelled_seconds: float = 0.0
    below_request: frozenset[str] = frozenset()
    """Reconfigurable jobs that ran some attempt slower than requested."""


class _Clock:
    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class _LiveRunningJob(RunningJob):
    """A ``RunningJob`` whose ``progress`` is derived from the virtual clock.

    Work accrues from ``_work_from`` (attempt start plus any resume overhead)
    until the preemption notice, on top of ``_base`` (progress at attempt start).
    """

    __slots__ = ("_base", "_work_from", "_clock", "_index", "_rate", "_ref")

    @property
    def progress(self) -> float:  # type: ignore[override]
        t = self._clock.now if self.notice_time is None else self.notice_time
        done = t - self._work_from
        return self._base + done * self._rate if done > 0 else self._base

    @progress.setter
    def progress(self, value: float) -> None:
        self._base = value

    @property
    def steps_done(self) -> float:  # type: ignore[override]
        """Iterations done: work over the reference iteration time."""
        return self.progress / self._ref if self._ref else 0.0

    @steps_done.setter
    def steps_done(self, value: float) -> None:
        pass  # derived from progress


class _Job:
    """The simulator's private state of one job."""

    __slots__ = (
        "spec", "duration", "state", "attempt", "progress", "preemptions",
        "first_start", "completion", "pending", "running", "overhead", "speed", "modelled", "reshape",
        "reconfigurations", "last_reconfigure",
    )

    def __init__(self, sim_job: SimJob) -> None:
        self.spec = sim_job.spec
        self.duration = sim_job.duration
        self.speed = sim_job.speed
        self.modelled = False  # the current attempt's iteration time came from the model
        self.reshape: Reconfigure | None = None
        # Kept across attempts, so a restart after a preemption does not
        # reset a policy's minimum interval between reconfigurations.
        self.reconfigurations = 0
        self.last_reconfigure: float | None = None
        self.state = _FUTURE
        self.attempt = 0
        self.progress = 0.0
        self.preemptions = 0
        self.first_start: float | None = None
        self.completion: float | None = None
        self.pending: PendingJob | None = None
        self.running: _LiveRunningJob | None = None
        self.overhead = 0.0


def _pending_key(p: PendingJob) -> tuple[float, str]:
    return (p.spec.submit_time, p.spec.id)


def _insert(queue: list[PendingJob], p: PendingJob) -> None:
    """Insert keeping arrival order; arrivals (the common case) append."""
    if queue and _pending_key(queue[-1]) > _pending_key(p):
        queue.insert(bisect_left(queue, _pending_key(p), key=_pending_key), p)
    else:
        queue.append(p)


def _remove(queue: list[PendingJob], gone: list[PendingJob]) -> None:
    """Remove these entries: by binary search when few, else in one pass."""
    if len(gone) > 8:
        ids = {id(p) for p in gone}
        queue[:] = [p for p in queue if id(p) not in ids]
    else:
        for p in gone:
            del queue[bisect_left(queue, _pending_key(p), key=_pending_key)]


class Simulator:
    """One run of one policy over one workload on one cluster."""

    def __init__(
        self,
        policy: Policy,
        nodes: Sequence[Node],
        jobs: Sequence[SimJob],
        config: SimConfig = SimConfig(),
        progress: ProgressCallback | None = None,
    ) -> None:
        self.policy = policy
        self.config = config
        self.nodes = list(nodes)
        self._node_index = {n.name: i for i, n in enumerate(self.nodes)}
        if len(self._node_index) != len(self.nodes):
            raise ValueError("node names must be unique")
        self._ledger = FreeLedger(self.nodes)
        self.total_gpus = sum(n.gpus for n in self.nodes)
        ordered = sorted(jobs, key=lambda j: (j.spec.submit_time, j.spec.id))
        self._jobs = [_Job(j) for j in ordered]
        self._by_id = {j.spec.id: j for j in self._jobs}
        if len(self._by_id) != len(self._jobs):
            raise ValueError("job ids must be unique")
        zero = next((j.spec.id for j in self._jobs if j.spec.num_gpus < 1), None)
        if zero is not None:
            raise ValueError(f"job {zero!r} asks for 0 GPUs; the policies place GPU jobs only")
        self._progress_cb = progress
        self._clock = _Clock()
        self._events: list[tuple[float, int, int, _Job, int]] = []
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
        self._attempts: list[Attempt] | None = [] if config.record_attempts else None
        self._util_times = array("d")
        self._util_gpus = array("l")
        self._done = 0
        self._decide_calls = 0
        self._reconfigurations = 0
        self._timed = [0, 0, 0.0, 0.0]  # attempts, modelled attempts, seconds, modelled seconds
        self._below: set[str] = set()
        # A policy that reconfigures running jobs may act with nothing pending
        # (grow jobs into GPUs a completion freed).
        self._decide_idle = bool(getattr(policy, "decide_without_pending", False))

    # ------------------------------------------------------------------ run

    def run(self) -> SimResult:
        """Simulate until every job has completed; return the result."""
        jobs, n = self._jobs, len(self._jobs)
        events = self._events
        arrival = 0
        batches = 0
        pending = self.snapshot.pending
        while arrival < n or events:
            t = events[0][0] if events else jobs[arrival].spec.submit_time
            if arrival < n and jobs[arrival].spec.submit_time < t:
                t = jobs[arrival].spec.submit_time
            self._clock.now = t
            before = self._allocated
            while events and events[0][0] == t:
                _, _, kind, job, attempt = heapq.heappop(events)
                if job.attempt != attempt:
                    continue  # stale: that attempt was preempted
                if kind == _COMPLETE:
                    self._complete(job, t)
                elif kind == _VACATE:
                    self._vacate(job, t)
                elif kind == _WAKE:
                    pass  # only calls decide: a job became old enough to give GPUs back
                else:
                    self._relaunch(job, job.reshape, t, 0.0)
            while arrival < n and jobs[arrival].spec.submit_time == t:
                self._arrive(jobs[arrival])
                arrival += 1
            if pending or (self._decide_idle and self.snapshot.running):
                self._decide(t)
            if self._allocated != before:
                self._util_times.append(t)
                self._util_gpus.append(self._allocated)
            batches += 1
            if self._progress_cb is not None and batches % 1024 == 0:
                self._progress_cb(self._done, n)
            if not events and arrival >= n and pending:
                raise SimulationError(
                    f"stalled at t={t:g}: {len(pending)} job(s) pending, nothing running, no arrivals left "
                    f"(first: {pending[0].spec.id}, {pending[0].spec.num_gpus} GPUs)"
                )
        if self._progress_cb is not None:
            self._progress_cb(self._done, n)
        return self._result()

    # --------------------------------------------------------------- events

    def _arrive(self, job: _Job) -> None:
        job.state = _PENDING
        job.pending = PendingJob(spec=job.spec)
        self._enqueue(job)

    def _complete(self, job: _Job, t: float) -> None:
        r = job.running
        self._release(job, t)
        self._lost_gpu_seconds += r.spec.num_gpus * job.overhead
        job.state = _DONE
        job.progress = job.duration
        job.completion = t
        job.running = None
        self._done += 1
        self._log_attempt(job, r, t)

    def _vacate(self, job: _Job, t: float) -> None:
        r = job.running
        self._release(job, t)
        gpus = r.spec.num_gpus
        notice = r.notice_time
        # Time held after the notice, plus the part of the resume overhead the
        # attempt got through before its notice.
        self._lost_gpu_seconds += gpus * ((t - notice) + min(job.overhead, notice - r.attempt_start))
        job.progress = r.progress
        job.state = _PENDING
        job.running = None
        job.pending = PendingJob(
            spec=job.spec, progress=job.progress, preemptions=job.preemptions, first_start=job.first_start,
            steps_done=r.steps_done,
        )
        self._enqueue(job)
        self._log_attempt(job, r, t)

    def _release(self, job: _Job, t: float) -> None:
        r = job.running
        spec = r.spec
        self._close_timing(job, r, t)
        self._ledger.release(spec, placement=r.placement)
        self._allocated -= spec.num_gpus
        self._charge(spec, -spec.num_gpus, t)
        self._allocated_gpu_seconds += spec.num_gpus * (t - r.attempt_start)
        running = self.snapshot.running
        last = running.pop()
        if last is not r:
            running[r._index] = last
            last._index = r._index

    def _log_attempt(self, job: _Job, r: _LiveRunningJob, t: float) -> None:
        if self._attempts is not None:
            self._attempts.append(
                Attempt(job.spec.id, job.spec.job_class, r.placement, r.attempt_start, t, r.notice_time,
                        r.preempted_for)
            )

    # ------------------------------------------------------------ decisions

    def _decide(self, t: float) -> None:
        self._decide_calls += 1
        if self._usage is not None:
            self.snapshot.tenants = self._usage.state(t)
        decisions = self.policy.decide(self.snapshot, t)
        started: list[_Job] = []
        by_id = self._by_id
        reconfigures = [d for d in decisions if d.__class__ is Reconfigure]
        if reconfigures:
            self._reconfigure_all(reconfigures, t)
        for d in decisions:
            cls = d.__class__
            if cls is Pend:
                job = by_id.get(d.job_id)
                if job is None or job.state != _PENDING:
                    raise SimulationError(f"t={t:g}: Pend for {d.job_id!r}, which is not pending")
            elif cls is Start:
                started.append(self._start(d, t))
            elif cls is Preempt:
                self._preempt(d, t)
            elif cls is Reconfigure:
                pass  # applied above, together
            else:
                raise SimulationError(f"t={t:g}: unknown decision {d!r}")
        if started:
            self._remove_pending(started)

    def _start(self, d: Start, t: float) -> _Job:
        job = self._by_id.get(d.job_id)
        if job is None or job.state != _PENDING:
            raise SimulationError(f"t={t:g}: Start for {d.job_id!r}, which is not pending")
        placement = d.placement
        spec = self._allocation(job, d, t, "Start")
        try:
            self._ledger.hold(spec, placement)
        except ValueError as e:
            raise SimulationError(f"t={t:g}: Start {spec.id} over-allocates: {e}") from None
        plan, rate = self._speed(job, d, spec, t)
        if job.first_start is None:
            job.first_start = t
        job.overhead = self.config.resume_overhead if job.preemptions else 0.0
        r = _LiveRunningJob(
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
        job.state = _RUNNING
        job.attempt += 1
        self._allocated += spec.num_gpus
        self._charge(spec, spec.num_gpus, t)
        self._push(r._work_from + (job.duration - job.progress) / rate, _COMPLETE, job)
        if self._reclaim_after is not None:
            self._push(t + self._reclaim_after, _WAKE, job)
        return job

    def _allocation(self, job: _Job, d: Start | Reconfigure, t: float, what: str) -> JobSpec:
        """The job's spec carrying the allocation ``d`` gives it, validated:
        GPU count (the request, or within ``gpu_range`` for a reconfigurable
        job), known nodes, CPUs."""
        spec = job.spec
        placement = d.placement
        g = placement.num_gpus
        elastic = job.speed is not None and spec.reconfigurable
        lo, hi = spec.gpu_range if elastic else (spec.num_gpus, spec.num_gpus)
        if not lo <= g <= hi:
            need = f"{spec.num_gpus}" if lo == hi else f"{lo} to {hi}"
            raise SimulationError(f"t={t:g}: {what} {spec.id} with {g} GPUs, the job needs {need}")
        for name, _ in placement.parts:
            if name not in self._node_index:
                raise SimulationError(f"t={t:g}: {what} {spec.id} on unknown node {name!r}")
        cpus = d.cpus
        if cpus is not None and not (cpus >= 0 and cpus < float("inf")):
            raise SimulationError(f"t={t:g}: {what} {spec.id} with cpus={cpus!r}")
        if g == spec.num_gpus and cpus is None:
            return spec
        return replace(
            spec, num_gpus=g, num_cpus=spec.num_cpus * g / spec.num_gpus if cpus is None else float(cpus),
            mem_gb=spec.mem_gb * g / spec.num_gpus,
        )

    def _speed(self, job: _Job, d: Start | Reconfigure, alloc: JobSpec, t: float) -> tuple[str, float]:
        """The plan the attempt runs and its rate (seconds of work per second);
        counts iteration times that came from the model."""
        spec = job.spec
        plan = d.plan or spec.plan
        if job.speed is None:
            return plan, 1.0
        if plan != spec.plan and plan not in spec.allowed_plans:
            raise SimulationError(f"t={t:g}: {spec.id} may not run plan {plan!r} (allowed: {spec.allowed_plans})")
        shape = tuple(g for _, g in d.placement.parts)
        found = job.speed.iter_time(plan, shape, alloc.num_cpus or None)
        if found is None:
            raise SimulationError(f"t={t:g}: {spec.id}: plan {plan!r} cannot run on {shape} GPUs per node")
        seconds, measured = found
        job.modelled = not measured
        self._timed[0] += 1
        self._timed[1] += 0 if measured else 1
        rate = job.speed.reference / seconds
        if rate < 1.0 - 1e-9:
            self._below.add(spec.id)
        return plan, rate

    def _close_timing(self, job: _Job, r: RunningJob, t: float) -> None:
        if job.speed is not None:
            span = t - r.attempt_start
            self._timed[2] += span
            if job.modelled:
                self._timed[3] += span

    def _reconfigure_all(self, decisions: list[Reconfigure], t: float) -> None:
        """Apply one call's Reconfigures together, before its other decisions:
        every job relaunching now gives up its old allocation before any takes
        its new one, so jobs may trade places."""
        now = [job for job in (self._reconfigure(d, t) for d in decisions) if job is not None]
        for job, _ in now:
            self._stop_attempt(job, t)
        for job, d in now:
            self._start_attempt(job, d, t, job.spec.grace_period)

    def _reconfigure(self, d: Reconfigure, t: float) -> tuple[_Job, Reconfigure] | None:
        """Validate and give notice; the job and decision when it relaunches
        at once, None when it first checkpoints on its current resources."""
        job = self._by_id.get(d.job_id)
        if job is None or job.state != _RUNNING:
            raise SimulationError(f"t={t:g}: Reconfigure for {d.job_id!r}, which is not running (or is stopping)")
        if job.speed is None or not job.spec.reconfigurable:
            raise SimulationError(f"t={t:g}: Reconfigure for {d.job_id!r}, which is not reconfigurable")
        r = job.running
        new = self._allocation(job, d, t, "Reconfigure")
        old_parts = {n: (g, c, m) for n, g, c, m in node_charges(r.spec, r.placement)}
        eps = 1e-9
        shrink = all(
            n in old_parts and g <= old_parts[n][0] and c <= old_parts[n][1] + eps and m <= old_parts[n][2] + eps
            for n, g, c, m in node_charges(new, d.placement)
        )
        r.notice_time = t  # freezes progress
        job.attempt += 1  # the pending completion event is now stale
        job.reconfigurations += 1
        job.last_reconfigure = t
        r.reconfigurations = job.reconfigurations
        r.last_reconfigure = t
        self._reconfigurations += 1
        grace = job.spec.grace_period
        if grace > 0 and shrink:
            # Checkpoint on the current resources, then give some up.
            r.reconfiguring = True
            r.reconfigured_for = d.for_job
            job.state = _RESHAPING
            job.reshape = d
            self._push(t + grace, _RESHAPE, job)
            return None
        return job, d

    def _relaunch(self, job: _Job, d: Reconfigure, t: float, idle: float) -> None:
        """End the attempt stopped at ``r.notice_time`` and start the next on
        ``d``'s allocation; ``idle`` seconds of checkpointing still to come."""
        self._stop_attempt(job, t)
        self._start_attempt(job, d, t, idle)

    def _stop_attempt(self, job: _Job, t: float) -> None:
        """Release the resources of the attempt stopped at its notice."""
        r = job.running
        old = r.spec
        notice = r.notice_time
        self._close_timing(job, r, t)
        self._ledger.release(old, placement=r.placement)
        self._allocated -= old.num_gpus
        self._charge(old, -old.num_gpus, t)
        self._allocated_gpu_seconds += old.num_gpus * (t - r.attempt_start)
        self._lost_gpu_seconds += old.num_gpus * ((t - notice) + min(job.overhead, notice - r.attempt_start))
        self._log_attempt(job, r, t)

    def _start_attempt(self, job: _Job, d: Reconfigure, t: float, idle: float) -> None:
        """The next attempt on ``d``'s allocation, after ``idle`` seconds of
        checkpointing and the reconfiguration overhead."""
        r = job.running
        base = r.progress
        spec = self._allocation(job, d, t, "Reconfigure")
        try:
            self._ledger.hold(spec, d.placement)
        except ValueError as e:
            raise SimulationError(f"t={t:g}: Reconfigure {spec.id} over-allocates: {e}") from None
        plan, rate = self._speed(job, d, spec, t)
        job.overhead = idle + self.config.reconfigure_overhead
        job.state = _RUNNING
        job.reshape = None
        r.spec = spec
        r.placement = d.placement
        r.plan = plan
        r.attempt_start = t
        r.notice_time = None
        r.reconfiguring = False
        r.reconfigured_for = None
        r.progress = base
        r._work_from = t + job.overhead
        r._rate = rate
        self._allocated += spec.num_gpus
        self._charge(spec, spec.num_gpus, t)
        self._push(r._work_from + (job.duration - base) / rate, _COMPLETE, job)

    def _preempt(self, d: Preempt, t: float) -> None:
        job = self._by_id.get(d.job_id)
        if job is None or job.state != _RUNNING:
            raise SimulationError(f"t={t:g}: Preempt for {d.job_id!r}, which is not running (or already preempting)")
        r = job.running
        r.notice_time = t  # freezes progress at the notice
        r.preempting = True
        r.preempted_for = d.for_job
        job.preemptions += 1
        r.preemptions = job.preemptions
        job.state = _PREEMPTING
        job.attempt += 1  # the pending completion event is now stale
        self._preemptions.append(
            PreemptionRecord(
                t, job.spec.id, job.spec.job_class, d.for_job, t - r.attempt_start, r.progress, job.preemptions
            )
        )
        self._push(t + job.spec.grace_period, _VACATE, job)

    def _enqueue(self, job: _Job) -> None:
        """Put the job's PendingJob in ``pending`` (and ``pending_te`` for a TE
        job) at its arrival position."""
        _insert(self.snapshot.pending, job.pending)
        if job.spec.job_class is JobClass.TE:
            _insert(self.snapshot.pending_te, job.pending)

    def _remove_pending(self, started: list[_Job]) -> None:
        snap = self.snapshot
        _remove(snap.pending, [j.pending for j in started])
        te = [j.pending for j in started if j.spec.job_class is JobClass.TE]
        if te:
            _remove(snap.pending_te, te)
        for job in started:
            job.pending = None

    # -------------------------------------------------------------- helpers

    def _charge(self, spec: JobSpec, gpus: int, t: float) -> None:
        """Fair share: the tenant (and user) of ``spec`` holds ``gpus`` more GPUs from ``t``."""
        if self._usage is not None:
            self._usage.add(spec.tenant, spec.user, gpus, t)

    def _push(self, when: float, kind: int, job: _Job) -> None:
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
            timed_attempts=self._timed[0],
            modelled_attempts=self._timed[1],
            timed_seconds=self._timed[2],
            modelled_seconds=self._timed[3],
            below_request=frozenset(self._below),
        )


def simulate(
    policy: Policy,
    nodes: Sequence[Node],
    jobs: Sequence[SimJob],
    config: SimConfig = SimConfig(),
    progress: ProgressCallback | None = None,
) -> SimResult:
    """Run ``policy`` over ``jobs`` on ``nodes``; see :class:`Simulator`."""
    return Simulator(policy, nodes, jobs, config, progress).run()
