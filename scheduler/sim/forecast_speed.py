"""How fast a reconfigurable job runs in a forecast: as its own throughput function says.

The simulator replays a reconfigurable job's true speed (``SimJob.speed``); a
forecast cannot know it and starts from a snapshot, whose jobs carry only what
the policies see: ``JobSpec.throughput`` (the measured-then-modelled
iteration times of the job's model). ``believed_speed`` turns that into a
``JobSpeed``, so that a forecast lets a policy give such a job any GPU count in
its range or another allowed plan, as the live loop does, and runs the job at
the speed the policy expected when it chose. Without it every reconfigurable
job was held to its requested GPU count, and a policy that grew one (Rubick on
an idle cluster) made the whole forecast fail.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.core.model import JobSpec, JobThroughput
from scheduler.sim.workloads.types import JobSpeed


@dataclass(frozen=True, slots=True)
class BelievedSpeed:
    """``SimJob.speed`` from a job's throughput function. ``reference`` is its seconds per iteration
    as requested; ``iter_time`` the function's time of ``plan`` on ``placement`` (or, for a function
    that only knows its best plan, that plan's time when it is ``plan``), never marked measured."""

    throughput: JobThroughput
    reference: float

    def iter_time(self, plan: str, placement: tuple[int, ...], cpus: float | None) -> tuple[float, bool] | None:
        seconds = _plan_time(self.throughput, plan, placement, cpus)
        return None if seconds is None or seconds <= 0 else (seconds, False)


def _plan_time(fn: JobThroughput, plan: str, placement: Sequence[int], cpus: float | None) -> float | None:
    time_of = getattr(fn, "time", None)
    if time_of is not None:
        return time_of(plan, placement, cpus)
    best = fn.best(placement, cpus)
    return best[1] if best is not None and best[0] == plan else None


def believed_speed(spec: JobSpec) -> JobSpeed | None:
    """A ``BelievedSpeed`` for a reconfigurable job whose request has a time; None for any other job
    (it runs one second of work per second, as requested)."""
    if not spec.reconfigurable or spec.throughput is None:
        return None
    try:
        reference = spec.throughput.reference()
    except ValueError:  # the request has no time (PlanError): the job is run as requested
        return None
    if not reference > 0:
        return None
    return BelievedSpeed(spec.throughput, reference)


__all__ = ["BelievedSpeed", "believed_speed"]
