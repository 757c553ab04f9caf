"""A scripted policy, and reconfigurable jobs with hand-made speeds, for simulator tests.

Work is counted in iterations; ``TIMES`` gives seconds per iteration by
(plan, GPUs), and a second node doubles the time. ``Script`` returns the
decisions listed for each time."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.decisions import Start
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, Placement
from scheduler.sim.workloads.types import SimJob

# Seconds per iteration by (plan, GPUs); a second node doubles the time.
TIMES = {("slow", 2): 1.0, ("fast", 2): 0.5, ("fast", 1): 0.8, ("fast", 4): 0.25, ("slow", 4): 0.5}


@dataclass(frozen=True)
class Speed:
    reference: float
    unmeasured: tuple = ()

    def iter_time(self, plan, placement, cpus):
        t = TIMES.get((plan, sum(placement)))
        if t is None:
            return None
        return t * 2 ** (len(placement) - 1), (plan, sum(placement)) not in self.unmeasured


def elastic(jid: str, steps: int = 100, gpus: int = 2, submit: float = 0.0, grace: float = 0.0,
            unmeasured: tuple = (), guaranteed: bool = False) -> SimJob:
    spec = JobSpec(id=jid, job_class=JobClass.BE, num_gpus=gpus, submit_time=submit, grace_period=grace,
                   model="m", plan="slow", allowed_plans=("fast", "slow"), min_gpus=1, max_gpus=4, steps=steps,
                   guaranteed=guaranteed, throughput=object())
    ref = TIMES[("slow", gpus)]
    return SimJob(spec, steps * ref, Speed(ref, unmeasured))


class Script:
    """Returns the decisions listed for a time (once) and starts "probe" jobs
    (which only make the simulator call it at their arrival) on node ``c``;
    records what it saw."""

    decide_without_pending = True

    def __init__(self, plan: dict[float, list]) -> None:
        self.plan = plan
        self.seen: dict[float, dict[str, tuple]] = {}

    def decide(self, snapshot, now):
        self.seen[now] = {r.spec.id: (r.progress, r.steps_done, r.plan, r.spec.num_gpus, r.reconfiguring)
                          for r in snapshot.running}
        out = self.plan.pop(now, [])
        probes = [p for p in snapshot.pending if p.spec.id.startswith("probe")]
        return out + [Start(p.spec.id, place(c=1)) for p in probes]


def probe(at: float, name: str = "probe") -> SimJob:
    """A one-iteration job on one GPU of node c, arriving at ``at``."""
    spec = JobSpec(id=f"{name}{at:g}", job_class=JobClass.BE, num_gpus=1, submit_time=at)
    return SimJob(spec, 0.001)


def place(**parts: int) -> Placement:
    return Placement.of(parts)


NODES = [NodeCapacity("a", 4), NodeCapacity("b", 4), NodeCapacity("c", 4)]
