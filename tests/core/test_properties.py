"""Invariants of every policy over random small clusters and snapshots."""

from __future__ import annotations

import copy
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Pend, Preempt, Start
from scheduler.core.model import JobClass, JobSpec, Node, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import EPS, FreeCapacity, FreeLedger, free_from_running
from scheduler.core.policy import make_policy

POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"]
PREEMPTING = {"preempt-random", "preempt-newest", "fitgpp"}


@st.composite
def scenarios(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n_nodes = rng.randint(1, 4)
    track = draw(st.booleans())
    nodes = [
        Node(f"n{i}", rng.choice([1, 2, 4, 4, 8]), rng.choice([16.0, 32.0]) if track else 0.0, rng.choice([64.0, 0.0]) if track else 0.0)
        for i in range(n_nodes)
    ]
    now = 10_000.0
    policy = POLICIES[draw(st.integers(0, len(POLICIES) - 1))]
    te_time_limit = rng.choice([100.0, 3600.0])
    max_preemptions = rng.choice([0, 1, 3, 3])
    n_pending = rng.randint(0, 8)
    pending = []
    t = 0.0
    for i in range(n_pending):
        t += rng.choice([0.0, 1.0, 500.0, 3000.0])
        cls = rng.choice([JobClass.TE, JobClass.TE, JobClass.BE])
        spec = JobSpec(
            f"p{i}", cls, rng.choice([1, 1, 1, 2, 2, 3, 4, 8, 12]), t,
            num_cpus=rng.choice([0.0, 0.0, 4.0, 10.0]), mem_gb=rng.choice([0.0, 0.0, 24.0]),
            grace_period=rng.choice([0.0, 30.0, 300.0]),
        )
        hold = "QuotaExceeded" if rng.random() < 0.15 else None
        pending.append(PendingJob(spec, progress=rng.choice([0.0, 0.0, 200.0]), hold_reason=hold))
    te_ids = [p.spec.id for p in pending if p.spec.job_class is JobClass.TE]
    ledger = FreeLedger(nodes)
    cap = FreeCapacity(ledger.free)
    running = []
    for i in range(rng.randint(0, 30)):
        cls = rng.choice([JobClass.TE, JobClass.BE, JobClass.BE])
        spec = JobSpec(
            f"r{i}", cls, rng.choice([1, 1, 2, 4]), rng.uniform(0, now),
            num_cpus=rng.choice([0.0, 2.0, 8.0]), mem_gb=rng.choice([0.0, 16.0]),
            grace_period=rng.choice([0.0, 10.0, 60.0, 600.0]), time_limit=rng.choice([None, 5000.0]),
        )
        placement = cap.place(spec)
        if placement is None:
            continue
        cap.take(spec, placement)
        ledger.hold(spec, placement)
        start = rng.uniform(0, now)
        preempting = rng.random() < 0.15
        running.append(
            RunningJob(
                spec, placement, start, start, progress=rng.uniform(0, now - start),
                preemptions=rng.choice([0, 1, 2, 3]), preempting=preempting,
                preempted_for=(rng.choice(te_ids + [None, "gone"]) if preempting else None),
                notice_time=(rng.uniform(start, now) if preempting else None),
            )
        )
    params = {"explain": True}
    if policy != "fifo-strict":
        params["starvation_threshold"] = rng.choice([None, 1000.0, 10**6])
    if policy in PREEMPTING:
        params |= {"te_time_limit": te_time_limit, "max_preemptions": max_preemptions}
    if policy == "preempt-random":
        params["seed"] = rng.randrange(100)
    return policy, params, Snapshot(nodes, running, pending), now, dict(ledger.free)


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
