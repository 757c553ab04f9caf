"""Whole simulated runs of ``rubick`` on random reconfigurable workloads
(hypothesis), with hand-made throughput functions as both the policy's
knowledge and the truth:

* every run ends with every job done (the simulator rejects any decision that
  over-fills a node, so capacity is never exceeded);
* no job is reconfigured twice within ``min_interval``;
* no guaranteed job ever runs below the throughput of its request, unless no
  allocation of the whole cluster reaches it;
* lost GPU-seconds are never negative nor more than allocated.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Reconfigure
from scheduler.core.policies.rubick import Rubick
from scheduler.sim.cluster import make_nodes
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob
from tests.support.fake_throughput import FakeThroughput, dp_curve, elastic_spec


@dataclass(frozen=True)
class TruthSpeed:
    fn: FakeThroughput

    @property
    def reference(self) -> float:
        return self.fn.reference()

    def iter_time(self, plan, placement, cpus):
        t = self.fn.time(plan, placement, cpus)
        return None if t is None else (t, True)


@st.composite
def workloads(draw):
    node_gpus = draw(st.sampled_from([2, 4, 8]))
    n_nodes = draw(st.integers(1, 3))
    total = node_gpus * n_nodes
    jobs = []
    for i in range(draw(st.integers(1, 10))):
        plans = {}
        for name in draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=2, unique=True)):
            plans[name] = dp_curve(draw(st.floats(0.5, 4.0)), total, draw(st.floats(0.5, 1.0)))
        user_plan = draw(st.sampled_from(sorted(plans)))
        fn = FakeThroughput(plans, user_plan, draw(st.integers(1, total)), draw(st.sampled_from([1.0, 1.5])))
        steps = draw(st.integers(1, 5000))
        spec = elastic_spec(f"j{i}", fn.user_gpus, fn, submit=draw(st.floats(0, 3000)), steps=steps,
                            guaranteed=draw(st.booleans()), hi=total, grace=draw(st.sampled_from([0.0, 20.0])))
        jobs.append(SimJob(spec, steps * fn.reference(), TruthSpeed(fn)))
    params = {
        "restart_time": draw(st.sampled_from([0.0, 30.0])),
        "min_interval": draw(st.sampled_from([0.0, 100.0, 1000.0])),
        "min_gain": draw(st.sampled_from([0.0, 0.05])),
        "starvation_threshold": draw(st.sampled_from([None, 600.0])),
        "max_preemptions": draw(st.sampled_from([0, 3])),
        "explain": False,
    }
    overhead = draw(st.sampled_from([0.0, 30.0]))
    return make_nodes(n_nodes, node_gpus), jobs, params, overhead


def reachable(fn: FakeThroughput, node_gpus: int, nodes: int) -> bool:
    """Does some allocation (packed on whole nodes) reach the request?"""
    for g in range(1, node_gpus * nodes + 1):
        full, rest = divmod(g, node_gpus)
        best = fn.best([node_gpus] * full + ([rest] if rest else []))
        if best is not None and fn.reference() / best[1] >= 1.0 - 1e-9:
            return True
    return False


class Recording:
    def __init__(self, policy) -> None:
        self.policy = policy
        self.decide_without_pending = True
        self.reconfigured: dict[str, list[float]] = defaultdict(list)

    def decide(self, snapshot, now):
        out = self.policy.decide(snapshot, now)
        for d in out:
            if isinstance(d, Reconfigure):
                self.reconfigured[d.job_id].append(now)
        return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_rubick_runs_keep_capacity_interval_and_guarantees(case):
    nodes, jobs, params, overhead = case
    policy = Recording(Rubick(**params))
    result = simulate(policy, nodes, jobs, SimConfig(reconfigure_overhead=overhead, resume_overhead=overhead))
    assert all(o.completion is not None for o in result.outcomes)
    for times in policy.reconfigured.values():
        assert all(b - a >= params["min_interval"] - 1e-6 for a, b in zip(times, times[1:])), times
    gpus = nodes[0].gpus
    guaranteed = {j.spec.id for j in jobs if j.spec.guaranteed and reachable(j.spec.throughput, gpus, len(nodes))}
    assert not (guaranteed & result.below_request)
    assert result.reconfigurations == sum(len(t) for t in policy.reconfigured.values())
    assert 0.0 <= result.lost_gpu_seconds <= result.allocated_gpu_seconds + 1e-6
