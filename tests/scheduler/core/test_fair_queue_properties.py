"""Invariants of every queue policy with fair share on, over random snapshots."""

from __future__ import annotations

import copy
import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Pend, Preempt, Reason, Start
from scheduler.core.fair_queue import FairView
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import FreeCapacity, FreeLedger
from scheduler.core.policies.base import RECLAIM_MAX_PREEMPTIONS
from scheduler.core.policy import make_policy

POLICIES = ["fifo", "fifo-strict", "te-priority", "preempt-random", "preempt-newest", "fitgpp"]
TENANTS = ["a", "b", "c"]
NOW = 50_000.0


@st.composite
def cases(draw):
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes = [NodeCapacity(f"n{i}", rng.choice([2, 4, 8])) for i in range(rng.randint(1, 4))]
    ledger = FreeLedger(nodes)
    cap = FreeCapacity(ledger.free)
    running = []
    for i in range(rng.randint(0, 20)):
        spec = JobSpec(f"r{i}", rng.choice([JobClass.TE, JobClass.BE, JobClass.BE]), rng.choice([1, 2, 4]), 0.0,
                       grace_period=rng.choice([0.0, 30.0, 600.0]), tenant=rng.choice(TENANTS))
        placement = cap.place(spec)
        if placement is None:
            continue
        cap.take(spec, placement)
        start = rng.choice([NOW - 60.0, NOW - 5000.0, rng.uniform(0, NOW)])
        preempting = rng.random() < 0.1
        running.append(RunningJob(spec, placement, start, start, preemptions=rng.choice([0, 1, 2, 3, 4, 5]),
                                  preempting=preempting, notice_time=NOW - 1.0 if preempting else None,
                                  preempted_for=rng.choice([None, "p0", "p1"]) if preempting else None))
    pending = []
    for i in range(rng.randint(0, 10)):
        spec = JobSpec(f"p{i}", rng.choice([JobClass.TE, JobClass.BE]), rng.choice([1, 1, 2, 4, 8]), float(i),
                       priority=rng.choice([0, 0, 5]), tenant=rng.choice(TENANTS), user=rng.choice(["u", "v"]))
        pending.append(PendingJob(spec, hold_reason="QuotaExceeded" if rng.random() < 0.1 else None))
    tenants = {t: TenantUsage(rng.choice([1.0, 2.0]), rng.choice([0.0, 1e4, 1e6]), {"u": 1.0}) for t in TENANTS[:2]}
    policy = draw(st.sampled_from(POLICIES))
    params = {} if policy == "fifo-strict" else {"reclaim_min_runtime": rng.choice([None, 0.0, 600.0])}
    return policy, params, Snapshot(nodes, running, pending, tenants=tenants)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_fair_share_decisions_are_complete_feasible_and_safe(case):
    name, params, snap = case
    before = copy.deepcopy(snap)
    policy = make_policy(name, **params)
    out = policy.decide(snap, NOW)
    assert snap == before
    pending = {p.spec.id: p for p in snap.pending}
    running = {r.spec.id: r for r in snap.running}
    assert sorted(d.job_id for d in out if not isinstance(d, Preempt)) == sorted(pending)
    free = {n.name: n.gpus for n in snap.nodes}
    for r in snap.running:
        for n, k in r.placement.parts:
            free[n] -= k
    for d in out:
        if isinstance(d, Start):
            assert pending[d.job_id].hold_reason is None
            for n, k in d.placement.parts:
                free[n] -= k
                assert free[n] >= 0
    victims = [d.job_id for d in out if isinstance(d, Preempt)]
    assert len(victims) == len(set(victims))
    started = {d.job_id for d in out if isinstance(d, Start)}
    for d in out:
        if not isinstance(d, Preempt):
            continue
        victim, job = running[d.job_id], pending[d.for_job]
        assert not victim.preempting and job.hold_reason is None and d.for_job not in started
        if d.reason is Reason.PREEMPTED_FOR_PRIORITY:
            # A reclaim: a BE victim of another tenant that ran long enough.
            assert params.get("reclaim_min_runtime") is not None
            assert victim.spec.job_class is JobClass.BE and victim.spec.tenant != job.spec.tenant
            assert NOW - victim.attempt_start >= params["reclaim_min_runtime"]
            # Reclaim's own limit, whatever the policy's limit for TE jobs.
            assert victim.preemptions < RECLAIM_MAX_PREEMPTIONS
        else:
            assert d.reason is Reason.PREEMPTED_FOR_TE and job.spec.job_class is JobClass.TE
    # Reclaim takes only from borrowing tenants and never below their own entitlement, except for an
    # overshoot, which leaves them above the level (GPUs per share) its beneficiary's tenant had: every
    # reclaim raises the lowest level among the tenants involved, so reclaims cannot cascade or cycle.
    view = FairView(snap, snap.tenants)
    reclaims = [d for d in out if isinstance(d, Preempt) and d.reason is Reason.PREEMPTED_FOR_PRIORITY]
    taken: dict[str, float] = {}
    for d in reclaims:
        t = running[d.job_id].spec.tenant
        taken[t] = taken.get(t, 0.0) + running[d.job_id].spec.num_gpus
    # The pass serves jobs with victims or with resources already vacating (told "reclaiming GPUs"),
    # those within their tenant's entitlement first; it ends after the one overshoot with victims, if
    # any: the job of the last reclaim, when it takes its tenant (with every job of the tenant the pass
    # served) beyond its entitlement.
    served = {d.for_job for d in reclaims} | {d.job_id for d in out if isinstance(d, Pend)
                                              and d.message.startswith("fair share: reclaiming GPUs")}
    overshoot = None
    if reclaims:
        last = pending[reclaims[-1].for_job].spec
        gained = sum(pending[j].spec.num_gpus for j in served if pending[j].spec.tenant == last.tenant)
        if view.alloc.get(last.tenant, 0.0) + gained > view.entitled[last.tenant] + 1e-9:
            overshoot = last
    for t, gpus in taken.items():
        assert view.alloc[t] > view.entitled[t] + 1e-9, (t, view.alloc, view.entitled)
        left = view.alloc[t] - gpus
        if left < view.entitled[t] - 1e-9:
            # Only the overshoot takes a tenant below its entitlement, and not onto the level its
            # beneficiary's tenant had (GPUs per share).
            assert overshoot is not None and any(
                running[d.job_id].spec.tenant == t and d.for_job == overshoot.id for d in reclaims), (t, gpus)
            assert left / view.tenants[t].share > view.level(overshoot.tenant), (t, gpus, view.alloc, view.entitled)
    # One reservation per tenant below its part at most, and no node reserved twice.
    reserved = [(pending[d.job_id].spec.tenant, m.group(1).split(", ")) for d in out if isinstance(d, Pend)
                and (m := re.match(r"fair share: project \S+ holds .*?: ([^:]+) reserved for it;", d.message))]
    assert len({t for t, _ in reserved}) == len(reserved)
    nodes = [n for _, ns in reserved for n in ns]
    assert len(nodes) == len(set(nodes))
    quiet = make_policy(name, **(params | {"explain": False})).decide(snap, NOW)
    assert quiet == [d for d in out if not isinstance(d, Pend)]
    assert make_policy(name, **params).decide(snap, NOW) == out
