"""Plan-unaware policies on jobs with 3D plans: the shared placement keeps a
plan's tensor-parallel groups on one node each, so every registered queue
policy gets results on a Morphling workload instead of a start the plan
cannot run on (which the simulator refuses as a policy bug)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.core.model import JobClass, JobSpec, NodeCapacity
from scheduler.core.perf.plans import PlanError, check_plan_fits, parse_plan
from scheduler.core.policy import make_policy
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

from tests.support.traces import require_trace

QUEUE_POLICIES = ("fifo", "fifo-strict", "fitgpp", "fitgpp-shrink", "te-priority", "preempt-newest", "preempt-random")


@dataclass(frozen=True)
class PlanSpeed:
    """One second per iteration wherever the plan can run; like the replayed
    times, nothing (the start is refused) where a 3D plan's tensor-parallel
    degree exceeds every node's share."""

    reference: float = 1.0

    def iter_time(self, plan, placement, cpus):
        try:
            check_plan_fits(parse_plan(plan), placement)
        except PlanError:
            return None
        return 1.0, True


def job(jid: str, gpus: int, plan: str, steps: int, submit: float = 0.0) -> SimJob:
    spec = JobSpec(id=jid, job_class=JobClass.BE, num_gpus=gpus, submit_time=submit, model="m", plan=plan,
                   steps=steps)
    return SimJob(spec, float(steps), PlanSpeed())


def workload() -> list[SimJob]:
    # Four 3-GPU data-parallel jobs leave one GPU free on each 4-GPU node; a
    # 4-GPU job with plan 122 (tensor-parallel pairs) arrives next. Spread
    # GPU by GPU it would get 1+1+1+1, where no pair shares a node.
    return [job(f"dp{i}", 3, "ga", 100 * (i + 1)) for i in range(4)] + [job("tp", 4, "122", 50, submit=1.0)]


@pytest.mark.parametrize("policy", QUEUE_POLICIES)
def test_a_3d_job_waits_for_whole_groups_and_the_run_completes(policy):
    nodes = [NodeCapacity(name, 4) for name in "abcd"]
    result = simulate(make_policy(policy), nodes, workload(), SimConfig(record_attempts=True))
    done = {o.job_id: o for o in result.outcomes}
    assert all(o.completion is not None for o in done.values())
    # It starts when dp0 leaves node a (t=100), on a alone.
    assert done["tp"].first_start == 100.0
    assert done["tp"].completion == 150.0
    assert [dict(a.placement.parts) for a in result.attempts if a.job_id == "tp"] == [{"a": 4}]


@pytest.fixture(scope="module")
def base_workload():
    from scheduler.sim.morphling import load_morphling

    return load_morphling(require_trace("morphling/workloads/workload-base.csv"))


@pytest.mark.parametrize("policy", ["fifo", "fitgpp"])
def test_plan_unaware_policies_run_workload_base_with_whole_groups(base_workload, policy):
    """The reported failure: fitgpp stopped with "plan '182' cannot run on
    (7, 4, 5) GPUs per node" on workload-base."""
    from scheduler.sim.cluster import make_nodes

    nodes = make_nodes(8, 8, 96.0, 1600.0)
    result = simulate(make_policy(policy, explain=False), nodes, base_workload.jobs, SimConfig(record_attempts=True))
    assert all(o.completion is not None for o in result.outcomes)
    plans = {j.spec.id: parse_plan(j.spec.plan) for j in base_workload.jobs}
    three_d = [a for a in result.attempts if plans[a.job_id].is_3d]
    assert three_d, "workload-base has jobs with 3D plans"
    for a in three_d:
        tp = plans[a.job_id].tp
        assert all(k % tp == 0 for _, k in a.placement.parts), (a.job_id, plans[a.job_id].name, a.placement)


def test_a_cluster_whose_nodes_cannot_hold_a_tensor_parallel_group_is_refused(capsys):
    # workload-base line 21 asks for plan 182: groups of 8 GPUs on one node.
    from scheduler.sim.cli import main

    path = require_trace("morphling/workloads/workload-base.csv")
    status = main(["--trace", str(path), "--trace-format", "morphling", "--policy", "fitgpp", "--cluster", "16x4",
                   "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2
    assert ":21: column 'exec_plan': plan 182 needs tensor-parallel groups of 8 GPUs on one node" in err
    assert "nodes have 4" in err
