"""Hand-made throughput functions and builders for reconfigurable jobs.

A ``FakeThroughput`` gives each plan a seconds-per-iteration curve over the
GPU count and a factor per extra node, so tests can say exactly which plan
wins where without the traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from scheduler.core.model import JobClass, JobSpec, PendingJob, Placement, RunningJob

BE = JobClass.BE


@dataclass(frozen=True, eq=False)
class FakeThroughput:
    """``times[plan][g]``: seconds per iteration on ``g`` GPUs on one node
    (missing: the plan cannot run there); each extra node multiplies by
    ``node_penalty``. The reference is ``user_plan`` on ``user_gpus``."""

    times: Mapping[str, Mapping[int, float]]
    user_plan: str
    user_gpus: int
    node_penalty: float = 1.25

    def time(self, plan: str, placement: Sequence[int], cpus: float | None = None) -> float | None:
        g = sum(placement)
        t = self.times.get(plan, {}).get(g)
        if t is None:
            return None
        return t * self.node_penalty ** (len([k for k in placement if k > 0]) - 1)

    def best(self, placement: Sequence[int], cpus: float | None = None) -> tuple[str, float] | None:
        found = [(t, p) for p in sorted(self.times) if (t := self.time(p, placement, cpus)) is not None]
        if not found:
            return None
        t, p = min(found)
        return p, t

    def reference(self) -> float:
        t = self.times[self.user_plan][self.user_gpus]
        return t


def dp_curve(t1: float, max_gpus: int = 16, efficiency: float = 0.8) -> dict[int, float]:
    """A data-parallel curve: ``t1`` on one GPU, each doubling ``efficiency`` x ideal."""
    exponent = math.log2(2 * efficiency)
    return {g: t1 / g**exponent for g in range(1, max_gpus + 1)}


def elastic_spec(jid: str, gpus: int, fn: FakeThroughput, *, submit: float = 0.0, steps: int = 1000,
                 guaranteed: bool = False, lo: int = 1, hi: int = 16, cpus: float = 0.0,
                 grace: float = 0.0, klass: JobClass = BE) -> JobSpec:
    return JobSpec(
        id=jid, job_class=klass, num_gpus=gpus, submit_time=submit, num_cpus=cpus, grace_period=grace,
        model="fake", plan=fn.user_plan, allowed_plans=tuple(sorted(fn.times)), min_gpus=lo, max_gpus=hi,
        guaranteed=guaranteed, steps=steps, throughput=fn,
    )


def pending(spec: JobSpec, **kw) -> PendingJob:
    return PendingJob(spec, **kw)


def running(spec: JobSpec, where: dict[str, int], plan: str, *, start: float = 0.0, steps_done: float = 0.0,
            last_reconfigure: float | None = None, preemptions: int = 0, **kw) -> RunningJob:
    """A running job holding ``where``; its spec carries that allocation."""
    placement = Placement.of(where)
    g = placement.num_gpus
    alloc = replace(spec, num_gpus=g, num_cpus=spec.num_cpus * g / spec.num_gpus)
    return RunningJob(alloc, placement, attempt_start=start, first_start=start, plan=plan, steps_done=steps_done,
                      last_reconfigure=last_reconfigure, preemptions=preemptions, **kw)
