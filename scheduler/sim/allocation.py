"""What an attempt gets: the allocation a ``Start`` or ``Reconfigure`` gives a
job, validated, and the speed the attempt runs at.

A job that is not reconfigurable runs its request at one second of work per
second. A reconfigurable job (a ``SimJob`` with ``speed``) may get any GPU
count in its ``gpu_range`` and any allowed plan; its work is counted in
reference seconds, so it runs at ``reference / iteration time`` seconds of
work per second, with the iteration time measured or, where never measured,
from the performance model (counted, so the report can say how much of a run
rests on the model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from scheduler.core.decisions import Reconfigure, Start
from scheduler.core.model import JobSpec, RunningJob
from scheduler.sim.job_state import SimJobState
from scheduler.sim.records import SimulationError


def allocation(job: SimJobState, d: Start | Reconfigure, t: float, what: str, nodes: Mapping[str, int]) -> JobSpec:
    """The job's spec carrying the allocation ``d`` gives it, validated:
    GPU count (the request, or within ``gpu_range`` for a reconfigurable
    job), known nodes (the keys of ``nodes``), CPUs. ``what`` names the
    decision in the error."""
    spec = job.spec
    placement = d.placement
    g = placement.num_gpus
    elastic = job.speed is not None and spec.reconfigurable
    lo, hi = spec.gpu_range if elastic else (spec.num_gpus, spec.num_gpus)
    if spec.adaptive is not None:
        lo, hi = 1, spec.adaptive.max_gpus
    if not lo <= g <= hi:
        need = f"{spec.num_gpus}" if lo == hi else f"{lo} to {hi}"
        raise SimulationError(f"t={t:g}: {what} {spec.id} with {g} GPUs, the job needs {need}")
    for name, _ in placement.parts:
        if name not in nodes:
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


class IterationTiming:
    """The speed of each attempt, and a run's count of where iteration times
    came from: attempts timed, those timed by the model, the seconds of each,
    and the reconfigurable jobs that ran some attempt slower than requested."""

    __slots__ = ("attempts", "modelled_attempts", "seconds", "modelled_seconds", "below_request")

    def __init__(self) -> None:
        self.attempts = 0
        self.modelled_attempts = 0
        self.seconds = 0.0
        self.modelled_seconds = 0.0
        self.below_request: set[str] = set()

    def speed(self, job: SimJobState, d: Start | Reconfigure, alloc: JobSpec, t: float) -> tuple[str, float]:
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
        self.attempts += 1
        self.modelled_attempts += 0 if measured else 1
        rate = job.speed.reference / seconds
        if rate < 1.0 - 1e-9:
            self.below_request.add(spec.id)
        return plan, rate

    def close(self, job: SimJobState, r: RunningJob, t: float) -> None:
        """Count the seconds of the attempt ``r`` ending at ``t``."""
        if job.speed is not None:
            span = t - r.attempt_start
            self.seconds += span
            if job.modelled:
                self.modelled_seconds += span


__all__ = ["IterationTiming", "allocation"]
