"""Reconfiguration in the simulator: how a running reconfigurable job moves
to another plan or allocation (see docs/rubick.md).

A ``Reconfigure`` stops the job (progress frozen), lets it checkpoint for its
grace period (holding its current resources when the new placement only gives
some up; otherwise the new placement is held at once) and relaunches it, after
``reconfigure_overhead`` seconds without progress, on the new placement. The
running job's ``spec`` then carries the allocation (GPUs, CPUs, memory).

These are the ``Simulator``'s methods for it, kept apart from its event loop;
they read and write the simulator state named below. So is the wake-up a
policy may ask for (``wake_at``: Rubick's minimum interval between a job's
reconfigurations ends), which the live loop's periodic cycle gives it anyway.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.core.decisions import Reconfigure
from scheduler.core.model import JobSpec, Snapshot
from scheduler.core.placement import FreeLedger, node_charges
from scheduler.sim.adaptive_attempt import finish_time, restart_seconds
from scheduler.sim.allocation import IterationTiming, allocation
from scheduler.sim.job_state import COMPLETE, RESHAPE, RESHAPING, RUNNING, WAKE, LiveRunningJob, SimJobState
from scheduler.sim.records import SimConfig, SimulationError


class _PolicyWake:
    """The "job" of a wake-up a policy asked for: an attempt that is never stale."""

    attempt = 0


_POLICY_WAKE = _PolicyWake()


class ReconfigurationMechanics:
    """Applying ``Reconfigure`` decisions; mixed into ``Simulator``."""

    config: SimConfig
    _by_id: dict[str, SimJobState]
    _node_index: dict[str, int]
    _ledger: FreeLedger
    _timing: IterationTiming
    _allocated: int
    _allocated_gpu_seconds: float
    _lost_gpu_seconds: float
    _reconfigurations: int
    _push: Callable[[float, int, SimJobState], None]
    _charge: Callable[[JobSpec, int, float], None]
    _wake_at: Callable[[Snapshot, float], float | None] | None
    _wakes: set[float]
    snapshot: Snapshot
    _log_attempt: Callable[[SimJobState, LiveRunningJob, float], None]

    def _wake_policy(self, t: float) -> None:
        """Have decide called again at the time the policy's ``wake_at`` gives (once per instant)."""
        when = self._wake_at(self.snapshot, t)
        if when is not None and when > t and when not in self._wakes:
            self._wakes.add(when)
            self._push(when, WAKE, _POLICY_WAKE)  # type: ignore[arg-type]

    def _reconfigure_all(self, decisions: list[Reconfigure], t: float) -> None:
        """Apply one call's Reconfigures together, before its other decisions:
        every job relaunching now gives up its old allocation before any takes
        its new one, so jobs may trade places."""
        now = [job for job in (self._reconfigure(d, t) for d in decisions) if job is not None]
        for job, _ in now:
            self._stop_attempt(job, t)
        for job, d in now:
            self._start_attempt(job, d, t, job.spec.grace_period)

    def _reconfigure(self, d: Reconfigure, t: float) -> tuple[SimJobState, Reconfigure] | None:
        """Validate and give notice; the job and decision when it relaunches
        at once, None when it first checkpoints on its current resources."""
        job = self._by_id.get(d.job_id)
        if job is None or job.state != RUNNING:
            raise SimulationError(f"t={t:g}: Reconfigure for {d.job_id!r}, which is not running (or is stopping)")
        if job.spec.adaptive is None and (job.speed is None or not job.spec.reconfigurable):
            raise SimulationError(f"t={t:g}: Reconfigure for {d.job_id!r}, which is not reconfigurable")
        r = job.running
        new = allocation(job, d, t, "Reconfigure", self._node_index)
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
            job.state = RESHAPING
            job.reshape = d
            self._push(t + grace, RESHAPE, job)
            return None
        return job, d

    def _relaunch(self, job: SimJobState, d: Reconfigure, t: float, idle: float) -> None:
        """End the attempt stopped at ``r.notice_time`` and start the next on
        ``d``'s allocation; ``idle`` seconds of checkpointing still to come."""
        self._stop_attempt(job, t)
        self._start_attempt(job, d, t, idle)

    def _stop_attempt(self, job: SimJobState, t: float) -> None:
        """Release the resources of the attempt stopped at its notice."""
        r = job.running
        old = r.spec
        notice = r.notice_time
        self._timing.close(job, r, t)
        self._ledger.release(old, placement=r.placement)
        self._allocated -= old.num_gpus
        self._charge(old, -old.num_gpus, t)
        self._allocated_gpu_seconds += old.num_gpus * (t - r.attempt_start)
        self._lost_gpu_seconds += old.num_gpus * ((t - notice) + min(job.overhead, notice - r.attempt_start))
        self._log_attempt(job, r, t)

    def _start_attempt(self, job: SimJobState, d: Reconfigure, t: float, idle: float) -> None:
        """The next attempt on ``d``'s allocation, after ``idle`` seconds of
        checkpointing and the reconfiguration overhead."""
        r = job.running
        base = r.progress
        spec = allocation(job, d, t, "Reconfigure", self._node_index)
        try:
            self._ledger.hold(spec, d.placement)
        except ValueError as e:
            raise SimulationError(f"t={t:g}: Reconfigure {spec.id} over-allocates: {e}") from None
        plan, rate = self._timing.speed(job, d, spec, t)
        job.overhead = idle + restart_seconds(job, self.config.reconfigure_overhead)
        job.state = RUNNING
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
        self._push(finish_time(job, r), COMPLETE, job)


__all__ = ["ReconfigurationMechanics"]
