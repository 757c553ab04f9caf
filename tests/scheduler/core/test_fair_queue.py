"""Fair share inside decide: order, TE bound, borrowing and reclaim."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Pend, Preempt, Reason, Start
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policy import make_policy

TE, BE = JobClass.TE, JobClass.BE
NOW = 100_000.0


def pend(jid, gpus, tenant, cls=BE, submit=0.0, priority=0, user=""):
    return PendingJob(JobSpec(jid, cls, gpus, submit, priority=priority, tenant=tenant, user=user))


def run(jid, node, gpus, tenant, cls=BE, start=0.0, grace=30.0, preemptions=0, **kw):
    spec = JobSpec(jid, cls, gpus, 0.0, grace_period=grace, tenant=tenant)
    return RunningJob(spec, Placement.of({node: gpus}), start, start, preemptions=preemptions, **kw)


def decide(policy, nodes, running, pending, tenants, **params):
    snap = Snapshot(nodes, running, pending, tenants=tenants)
    return make_policy(policy, **params).decide(snap, NOW)


def started(out):
    return [d.job_id for d in out if isinstance(d, Start)]


def preempted(out):
    return {d.job_id: d.for_job for d in out if isinstance(d, Preempt)}


def test_under_used_tenant_goes_first_in_every_queue_policy():
    # One free GPU; tenant a used a lot, b nothing; a's job arrived first.
    tenants = {"a": TenantUsage(1.0, 10_000.0), "b": TenantUsage(1.0, 0.0)}
    for name in ("fifo", "fifo-strict", "te-priority", "fitgpp", "preempt-newest"):
        out = decide(name, [NodeCapacity("n1", 1)], [], [pend("a1", 1, "a"), pend("b1", 1, "b", submit=5.0)], tenants)
        assert started(out) == ["b1"], name


def test_without_tenants_the_same_snapshot_is_arrival_order():
    out = decide("fitgpp", [NodeCapacity("n1", 1)], [], [pend("a1", 1, "a"), pend("b1", 1, "b", submit=5.0)], None)
    assert started(out) == ["a1"]


def test_within_a_tenant_priority_then_user_usage_then_arrival():
    tenants = {"a": TenantUsage(1.0, 100.0, {"heavy": 90.0, "light": 10.0})}
    pending = [pend("h", 1, "a", user="heavy"), pend("l", 1, "a", submit=1.0, user="light"),
               pend("p", 1, "a", submit=2.0, user="heavy", priority=5)]
    out = decide("te-priority", [NodeCapacity("n1", 2)], [], pending, tenants)
    assert started(out) == ["p", "l"]


def test_borrowing_tenant_gives_gpus_back_to_a_waiting_tenant():
    # a holds all 8 GPUs (borrowing: b now wants 4, entitlement 4 each).
    running = [run(f"a{i}", "n1", 2, "a", start=NOW - 3600, grace=60.0 * (i + 1)) for i in range(4)]
    tenants = {"a": TenantUsage(1.0, 50_000.0), "b": TenantUsage(1.0, 0.0)}
    for name in ("fifo", "te-priority", "fitgpp"):
        out = decide(name, [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b")], tenants)
        # Cheapest to resume first: the two shortest grace periods.
        assert preempted(out) == {"a0": "b1", "a1": "b1"}, name
        assert all(d.reason is Reason.PREEMPTED_FOR_PRIORITY for d in out if isinstance(d, Preempt))
        waiting = [d for d in out if isinstance(d, Pend) and d.job_id == "b1"]
        assert len(waiting) == 1 and waiting[0].reason is Reason.WAITING_FOR_PREEMPTION


def test_reclaim_never_preempts_a_job_younger_than_the_minimum_runtime():
    running = [run("a-old", "n1", 4, "a", start=NOW - 3600), run("a-new", "n1", 4, "a", start=NOW - 60, grace=0.0)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b")], tenants, reclaim_min_runtime=600.0)
    assert preempted(out) == {"a-old": "b1"}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b")], tenants, reclaim_min_runtime=7200.0)
    assert preempted(out) == {}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b")], tenants, reclaim_min_runtime=None)
    assert preempted(out) == {}


def test_no_reclaim_from_a_tenant_within_its_entitlement_or_for_one_beyond_it():
    # a holds 4 of 8, b holds 4: both at entitlement; b's extra job may not reclaim.
    running = [run("a1", "n1", 4, "a", start=0.0), run("b0", "n1", 4, "b", start=0.0)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b"), pend("a2", 2, "a")], tenants)
    assert preempted(out) == {}


def test_gpus_already_vacating_for_the_job_are_not_reclaimed_twice():
    running = [
        run("a0", "n1", 4, "a", start=0.0, preempting=True, preempted_for="b1", notice_time=NOW - 5),
        run("a1", "n1", 4, "a", start=0.0),
    ]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 4, "b")], tenants)
    assert preempted(out) == {}
    assert [d.reason for d in out if isinstance(d, Pend)] == [Reason.WAITING_FOR_PREEMPTION]


def test_te_privilege_is_bounded_by_the_tenants_entitlement():
    # 8 GPUs, a and b backlogged: entitlement 4 each. a's third 2-GPU TE job
    # is beyond it: it queues as BE, so it does not preempt b's BE job.
    running = [run("a-te1", "n1", 2, "a", cls=TE, start=NOW - 10), run("a-te2", "n1", 2, "a", cls=TE, start=NOW - 10),
               run("b-be", "n1", 4, "b", start=0.0)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    pending = [pend("a-te3", 2, "a", cls=TE), pend("b-be2", 4, "b")]
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, pending, tenants)
    assert "b-be" not in preempted(out)
    # Without fair share the TE job preempts.
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, pending, None)
    assert preempted(out) == {"b-be": "a-te3"}


def test_a_te_job_beyond_the_bound_is_told_why_it_waits_as_be():
    running = [run("a-te1", "n1", 2, "a", cls=TE, start=NOW - 10), run("a-te2", "n1", 2, "a", cls=TE, start=NOW - 10),
               run("b-be", "n1", 4, "b", start=0.0)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    pending = [pend("a-te3", 2, "a", cls=TE), pend("b-be2", 4, "b"), pend("b-te", 2, "b", cls=TE)]
    out = {d.job_id: d.message for d in decide("fitgpp", [NodeCapacity("n1", 8)], running, pending, tenants)
           if isinstance(d, Pend)}
    assert out["a-te3"].endswith("; queued as BE by fair share: TE jobs of project a hold 4 GPUs of its entitlement of 4")
    assert "fair share" not in out["b-be2"] and "queued as BE" not in out["b-te"]
    quiet = decide("fitgpp", [NodeCapacity("n1", 8)], running, pending, tenants, explain=False)
    assert not any(isinstance(d, Pend) for d in quiet)


def test_reclaim_never_takes_a_tenant_below_its_own_entitlement():
    # a holds 6 of 8 with one 6-GPU job (entitlement 4: borrowing 2); b wants 2.
    # Preempting the 6-GPU job would leave a with 0, below its 4: no reclaim.
    running = [run("a-big", "n1", 6, "a", start=0.0), run("b0", "n1", 2, "b", start=0.0)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 2, "b"), pend("a2", 2, "a")], tenants)
    assert preempted(out) == {}
    # With 2-GPU jobs a can give back exactly its excess.
    running = [run(f"a{i}", "n1", 2, "a", start=0.0) for i in range(3)] + [run("b0", "n1", 2, "b", start=0.0)]
    out = decide("fitgpp", [NodeCapacity("n1", 8)], running, [pend("b1", 2, "b"), pend("a2", 2, "a")], tenants)
    assert list(preempted(out).values()) == ["b1"]


def test_standing_adds_unknown_tenants_at_the_default_share_and_splits_by_what_each_wants():
    from scheduler.core.fair_queue import standing

    tenants, factor, entitled = standing(8, {"a": 4.0, "x": 1.0}, {"a": 6.0, "b": 6.0, "x": 1.0},
                                         {"a": TenantUsage(1.0, 100.0), "b": TenantUsage(1.0, 0.0)})
    assert set(tenants) == {"a", "b", "x"} and tenants["x"] == TenantUsage(1.0)
    # x wants 1 and gets it; a and b split the other 7 equally.
    assert entitled == pytest.approx({"a": 3.5, "b": 3.5, "x": 1.0})
    assert factor["b"] == 1.0 and factor["a"] < 1.0
