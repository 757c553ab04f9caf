"""Adaptive jobs in the simulator (``scheduler.core.adaptive``): an attempt's
progress and completion, and the rules that differ from a plain job.

* Progress is counted in the model's units (``spec.adaptive.target`` to
  complete). On a placement it advances at the model's goodput, which changes
  from epoch to epoch: ``AdaptiveRunningJob.progress`` walks the epochs from
  the attempt's base progress, and the completion event is placed where the
  walk reaches the target. Nothing is sampled: progress between events is
  exact.
* Every attempt, the first included, and every reconfiguration start with
  the model's ``restart_seconds`` without progress (the study charges its
  30 s restart at a job's first start too).
* A preempted adaptive job with no grace period gives its GPUs back at once,
  inside the decision that preempts it, so that the same round's starts and
  reconfigurations can use them (the study's scheduler reassigns GPUs in one
  step).
"""

from __future__ import annotations

from scheduler.core.decisions import Preempt
from scheduler.sim.job_state import LiveRunningJob, SimJobState


class AdaptiveRunningJob(LiveRunningJob):
    """A running adaptive job; ``progress`` follows the model (see the module doc)."""

    __slots__ = ("_shape",)

    @property
    def progress(self) -> float:  # type: ignore[override]
        t = self._clock.now if self.notice_time is None else self.notice_time
        return self.spec.adaptive.advance(self._base, self._shape, t - self._work_from)

    @progress.setter
    def progress(self, value: float) -> None:
        self._base = value


def shape_of(r: LiveRunningJob) -> tuple[int, ...]:
    """GPUs per node of the attempt's placement."""
    return tuple(g for _, g in r.placement.parts)


def finish_time(job: SimJobState, r: LiveRunningJob) -> float:
    """When the attempt ``r`` completes the job if nothing changes.

    An adaptive job's attempt learns its placement's shape here; a plain
    job runs its remaining work at the attempt's rate."""
    model = job.spec.adaptive
    if model is None:
        return r._work_from + (job.duration - r._base) / r._rate
    r._shape = shape_of(r)  # type: ignore[attr-defined]
    return r._work_from + model.finish_seconds(r._base, r._shape)  # type: ignore[attr-defined]


def restart_seconds(job: SimJobState, otherwise: float) -> float:
    """Seconds an attempt of ``job`` starts without progress: the model's
    restart for an adaptive job, ``otherwise`` for a plain one."""
    model = job.spec.adaptive
    return otherwise if model is None else model.restart_seconds


def vacates_at_once(job: SimJobState | None, d: Preempt) -> bool:
    """True when the preempted job gives its GPUs back inside the decision."""
    return job is not None and job.spec.adaptive is not None and job.spec.grace_period == 0


__all__ = ["AdaptiveRunningJob", "finish_time", "restart_seconds", "shape_of", "vacates_at_once"]
