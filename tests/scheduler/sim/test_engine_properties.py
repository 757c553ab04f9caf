"""Whole-run properties of every registered policy over random small clusters
and workloads (hypothesis): every job completes exactly once, no node is ever
over-allocated, TE jobs are preempted only past the TE time limit, no job is
preempted more often than the cap, work is accounted for, and a run is
deterministic."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.model import JobClass, JobSpec
from scheduler.core.policy import make_policy, policy_names
from scheduler.sim.cluster import make_nodes
from scheduler.sim.engine import simulate
from scheduler.sim.records import SimConfig
from scheduler.sim.runner import PolicySpec, accepted_params, build_policy
from scheduler.sim.workloads.types import SimJob

from tests.support.toy_policies import GreedyFifo, PreemptOldestForTE

TE_TIME_LIMIT = 120.0
MAX_PREEMPTIONS = 2
# Small thresholds so that the TE time limit and the anti-starvation rule
# actually trigger in small runs.
WANTED = {"te_time_limit": TE_TIME_LIMIT, "max_preemptions": MAX_PREEMPTIONS, "starvation_threshold": 300.0, "seed": 1}


def policy_factory(name: str):
    accepted = accepted_params(type(make_policy(name)))
    params = {k: v for k, v in WANTED.items() if k in accepted}
    return lambda: build_policy(PolicySpec(name, params))


POLICIES = {name: policy_factory(name) for name in policy_names()}
POLICIES["toy-preempt"] = lambda: PreemptOldestForTE(max_preemptions=MAX_PREEMPTIONS)
POLICIES["toy-greedy"] = GreedyFifo


@st.composite
def scenarios(draw):
    nodes = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([1, 2, 4]))
    total = nodes * gpus
    n = draw(st.integers(1, 14))
    jobs = []
    for i in range(n):
        klass = draw(st.sampled_from([JobClass.TE, JobClass.BE]))
        size = draw(st.integers(1, total))
        jobs.append(
            SimJob(
                JobSpec(
                    id=f"j{i:02d}",
                    job_class=klass,
                    num_gpus=size,
                    submit_time=float(draw(st.integers(0, 400))),
                    grace_period=float(draw(st.sampled_from([0, 5, 30]))),
                ),
                duration=float(draw(st.integers(1, 600))),
            )
        )
    overhead = float(draw(st.sampled_from([0, 10])))
    return nodes, gpus, jobs, overhead


class SnapshotChecker:
    """Checks, at every call, the snapshot fields the simulator keeps
    incrementally: pending in arrival order, pending_te = its TE jobs, free =
    capacity minus what running (and preempting) jobs hold."""

    def __init__(self, inner):
        self.inner = inner

    def decide(self, snapshot, now):
        keys = [(p.spec.submit_time, p.spec.id) for p in snapshot.pending]
        assert keys == sorted(keys)
        assert snapshot.pending_te == [p for p in snapshot.pending if p.spec.job_class is JobClass.TE]
        free = {n.name: n.gpus for n in snapshot.nodes}
        for r in snapshot.running:
            for node, g in r.placement.parts:
                free[node] -= g
        assert {n: v[0] for n, v in snapshot.free.items()} == free
        return self.inner.decide(snapshot, now)


def run(name, scenario):
    nodes, gpus, jobs, overhead = scenario
    return simulate(
        SnapshotChecker(POLICIES[name]()), make_nodes(nodes, gpus), jobs,
        SimConfig(resume_overhead=overhead, record_attempts=True),
    )


def check_invariants(scenario, result):
    nodes, gpus, jobs, _ = scenario
    ids = [j.spec.id for j in jobs]
    # Every job completes exactly once: one completed attempt, and it is its last.
    completed = [a.job_id for a in result.attempts if a.notice is None]
    assert sorted(completed) == sorted(ids)
    last = {}
    for a in sorted(result.attempts, key=lambda a: a.start):
        last[a.job_id] = a
    assert all(last[i].notice is None for i in ids)
    by_id = {j.spec.id: j for j in jobs}
    for o in result.outcomes:
        assert o.completion is not None and o.first_start >= o.submit_time
        assert o.completion >= o.first_start + o.duration - 1e-6
    # No node over-allocated at any time (intervals [start, end): a release at t
    # happens before an allocation at t).
    deltas = defaultdict(list)
    for a in result.attempts:
        for node, g in a.placement.parts:
            deltas[node] += [(a.start, 1, g), (a.end, 0, -g)]
    for node, events in deltas.items():
        level = 0
        for _, _, d in sorted(events):
            level += d
            assert level <= gpus, f"node {node} over-allocated"
    # Preemptions: TE only past the time limit (in this attempt, or in work done
    # over all attempts: "treated as BE from then on"); nobody more often than the cap.
    for p in result.preemptions:
        if p.job_class is JobClass.TE:
            assert max(p.attempt_runtime, p.progress) > TE_TIME_LIMIT
        assert p.count <= MAX_PREEMPTIONS
    # A preemption notice is always followed by a vacate after the grace period.
    for a in result.attempts:
        if a.notice is not None:
            assert a.end == pytest.approx(a.notice + by_id[a.job_id].spec.grace_period)
    useful = sum(j.spec.num_gpus * j.duration for j in jobs)
    assert result.allocated_gpu_seconds == pytest.approx(useful + result.lost_gpu_seconds)


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_whole_run_invariants(name, scenario):
    check_invariants(scenario, run(name, scenario))


@pytest.mark.parametrize("name", sorted(POLICIES))
@settings(max_examples=20, deadline=None)
@given(scenario=scenarios())
def test_run_is_deterministic(name, scenario):
    a, b = run(name, scenario), run(name, scenario)
    assert a.outcomes == b.outcomes
    assert a.preemptions == b.preemptions
    assert a.attempts == b.attempts


def test_every_registered_policy_is_covered():
    assert {"fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"} <= set(POLICIES)
