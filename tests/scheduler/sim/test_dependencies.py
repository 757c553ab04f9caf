"""Dependencies in the simulator: a dependent job never starts before the jobs it names have completed,
whatever the policy; bad dependencies are refused up front."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.dependencies import parse
from scheduler.core.model import JobClass, JobSpec
from scheduler.core.policy import make_policy, policy_names
from scheduler.sim.cluster import make_nodes
from scheduler.sim.dependencies import DependencyTracker
from scheduler.sim.engine import Simulator, simulate
from scheduler.sim.job_state import SimJobState
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

from tests.support.sim_jobs import job
from tests.support.toy_policies import GreedyFifo


def after(sim_job: SimJob, text: str) -> SimJob:
    return replace(sim_job, spec=replace(sim_job.spec, dependencies=parse(text)))


def test_a_dependent_job_waits_held_then_starts_when_its_dependency_completes():
    nodes = make_nodes(1, 4)
    jobs = [job("a", 0, 100, gpus=1), after(job("b", 0, 10, gpus=1), "afterok:a")]
    seen = []

    fifo = make_policy("fifo")

    class Spy:
        def decide(self, snapshot, now):
            seen.append((now, {p.spec.id: p.hold_reason for p in snapshot.pending}))
            return fifo.decide(snapshot, now)

    result = simulate(Spy(), nodes, jobs)
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["a"].first_start == 0 and by_id["a"].completion == 100
    assert by_id["b"].first_start == 100 and by_id["b"].completion == 110  # GPUs were free: it waited for a only
    assert seen[0] == (0.0, {"a": None, "b": "Dependency"})


def test_afterany_on_a_later_submission_and_chains():
    jobs = [after(job("c", 0, 5), "afterany:b"), after(job("b", 50, 5), "afterok:a"), job("a", 20, 5)]
    by_id = {o.job_id: o for o in simulate(make_policy("fifo"), make_nodes(1, 8), jobs).outcomes}
    assert (by_id["a"].first_start, by_id["b"].first_start, by_id["c"].first_start) == (20, 50, 55)


@pytest.mark.parametrize("jobs, message", [
    ([after(job("a", 0, 1), "afterok:zz")], "job 'a' depends on unknown job 'zz'"),
    ([after(job("a", 0, 1), "afternotok:b"), job("b", 0, 1)], "afternotok never holds"),
    ([after(job("a", 0, 1), "afterok:b"), after(job("b", 0, 1), "afterany:a")], "dependency cycle: "),
    ([after(job("a", 0, 1), "afterok:a")], "dependency cycle: a -> a"),
])
def test_bad_dependencies_are_refused_naming_the_job(jobs, message):
    with pytest.raises(ValueError, match=message):
        Simulator(GreedyFifo(), make_nodes(1, 4), jobs)
    with pytest.raises(ValueError, match=message):
        DependencyTracker([SimJobState(j) for j in jobs])


def _policy(name: str):
    return make_policy(name)


@st.composite
def workloads(draw):
    n = draw(st.integers(2, 12))
    jobs = []
    for i in range(n):
        spec = JobSpec(id=f"j{i}", job_class=draw(st.sampled_from([JobClass.TE, JobClass.BE])),
                       num_gpus=draw(st.integers(1, 4)), submit_time=float(draw(st.integers(0, 300))),
                       grace_period=float(draw(st.sampled_from([0, 10]))))
        earlier = draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True))
        named = [f"j{k}" for k in earlier if k < i]  # only earlier ids: no cycle
        if named:
            kind = draw(st.sampled_from(["afterok", "afterany"]))
            spec = replace(spec, dependencies=parse(f"{kind}:{':'.join(named)}"))
        jobs.append(SimJob(spec, float(draw(st.integers(1, 400)))))
    return jobs


PLAIN_POLICIES = [name for name in policy_names() if name not in {"optimus", "pollux"}]  # those need adaptive jobs


@pytest.mark.parametrize("name", PLAIN_POLICIES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=workloads())
def test_a_dependent_job_never_starts_before_its_dependencies_complete(name, jobs):
    result = simulate(_policy(name), make_nodes(2, 4), jobs, SimConfig(record_attempts=True))
    done = {o.job_id: o.completion for o in result.outcomes}
    assert all(c is not None for c in done.values())  # and every job still completes
    starts: dict[str, float] = {}
    for attempt in result.attempts:
        starts[attempt.job_id] = min(starts.get(attempt.job_id, attempt.start), attempt.start)
    for sim_job in jobs:
        for clause in sim_job.spec.dependencies:
            for other in clause.job_ids:
                assert starts[sim_job.spec.id] >= done[other], (sim_job.spec.id, other)
