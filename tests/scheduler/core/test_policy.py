"""The policy registry, and invariants of every policy over random small
clusters and snapshots."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings

from scheduler.core.decisions import Pend, Preempt, Start
from scheduler.core.model import JobClass, Snapshot
from scheduler.core.placement import EPS, free_from_running
from scheduler.core.policy import make_policy, policy_names
from tests.support.policy_scenarios import POLICIES, PREEMPTING, scenarios


def test_every_policy_is_registered():
    assert set(POLICIES) <= set(policy_names())


def test_unknown_policy_and_bad_params_are_named():
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        make_policy("nope")
    with pytest.raises(ValueError, match="starvation_threshold must be a number >= 0"):
        make_policy("fifo", starvation_threshold=-1)
    with pytest.raises(ValueError, match="max_preemptions must be an integer >= 0"):
        make_policy("fitgpp", max_preemptions=1.5)
    with pytest.raises(ValueError, match="loss_weight must be a number >= 0"):
        make_policy("fitgpp", loss_weight=-0.1)
    with pytest.raises(ValueError, match="seed must be an integer"):
        make_policy("preempt-random", seed="x")
    with pytest.raises(TypeError):
        make_policy("fifo", no_such_param=1)


def check_invariants(policy, params, snap, now, out):
    pending = {p.spec.id: p for p in snap.pending}
    running = {r.spec.id: r for r in snap.running}
    # Every pending job gets exactly one decision; nothing else is named except preempted running jobs.
    decided = [d.job_id for d in out if not isinstance(d, Preempt)]
    assert sorted(decided) == sorted(pending)
    # Starts are jointly feasible, with preempting jobs still holding their resources.
    free = {n: list(v) for n, v in free_from_running(snap.nodes, snap.running).items()}
    for d in out:
        if isinstance(d, Start):
            spec = pending[d.job_id].spec
            assert pending[d.job_id].hold_reason is None
            assert d.placement.num_gpus == spec.num_gpus
            for name, k in d.placement.parts:
                f = free[name]
                f[0] -= k
                f[1] -= spec.num_cpus * k / spec.num_gpus
                f[2] -= spec.mem_gb * k / spec.num_gpus
                assert f[0] >= 0 and f[1] >= -EPS and f[2] >= -EPS, (d, f)
    # Preemptions: only eligible running jobs, each once, always for a pending TE job.
    targets = [d.job_id for d in out if isinstance(d, Preempt)]
    assert len(targets) == len(set(targets))
    if policy not in PREEMPTING:
        assert not targets
    for d in out:
        if not isinstance(d, Preempt):
            continue
        victim = running[d.job_id]
        assert not victim.preempting
        assert victim.preemptions < params["max_preemptions"]
        if victim.spec.job_class is JobClass.TE:
            assert max(now - victim.attempt_start, victim.progress) > params["te_time_limit"]
        te = pending[d.for_job]
        assert te.spec.job_class is JobClass.TE and te.hold_reason is None
        assert d.for_job not in [x.job_id for x in out if isinstance(x, Start)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_decisions_are_feasible_complete_and_safe(case):
    policy, params, snap, now, _ = case
    before = copy.deepcopy(snap)
    out = make_policy(policy, **params).decide(snap, now)
    assert snap == before, "decide() must not modify the snapshot"
    check_invariants(policy, params, snap, now, out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_input_same_output(case):
    policy, params, snap, now, free = case
    out = make_policy(policy, **params).decide(snap, now)
    assert make_policy(policy, **params).decide(snap, now) == out
    # Node and running-job order carry no meaning, nor does who computes the free map
    # or the TE queue.
    te = [p for p in snap.pending if p.spec.job_class is JobClass.TE]
    shuffled = Snapshot(list(reversed(snap.nodes)), list(reversed(snap.running)), list(snap.pending), free, te)
    assert make_policy(policy, **params).decide(shuffled, now) == out
    # explain=False drops the Pends and changes nothing else.
    quiet = make_policy(policy, **(params | {"explain": False})).decide(snap, now)
    assert quiet == [d for d in out if not isinstance(d, Pend)]
