"""The guard of the job a cycle reserves nodes for: its reservation is computed
once, only when the job does not fit, and says why it exists."""

from __future__ import annotations

from scheduler.core.fair_queue import FairView
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policies.base import Cycle
from scheduler.core.policies.starvation import NO_NODES, StarvationGuard, free_outside
from scheduler.core.policy import make_policy

NOW = 100_000.0


def be(jid: str, gpus: int, tenant: str = "", submit: float = 0.0) -> PendingJob:
    return PendingJob(JobSpec(jid, JobClass.BE, gpus, submit, tenant=tenant))


def running(jid: str, parts: dict[str, int], tenant: str = "") -> RunningJob:
    spec = JobSpec(jid, JobClass.BE, sum(parts.values()), 0.0, tenant=tenant)
    return RunningJob(spec, Placement.of(parts), NOW - 3600, NOW - 3600)


def two_nodes(*jobs: RunningJob, pending=(), tenants=None) -> Snapshot:
    return Snapshot([NodeCapacity("n1", 8), NodeCapacity("n2", 8)], list(jobs), list(pending), tenants=tenants)


def test_a_job_that_fits_gets_no_reservation_and_blocks_nothing():
    s = two_nodes(running("r", {"n1": 6}))
    guard = StarvationGuard(Cycle(s, NOW, True), be("big", 8))
    assert guard.reservation() is None and guard.avoid() == NO_NODES and guard.why_of("big") is None


def test_a_job_that_does_not_fit_reserves_the_nodes_closest_to_holding_it_once():
    s = two_nodes(running("r1", {"n1": 6}), running("r2", {"n2": 3}))
    cyc = Cycle(s, NOW, True)
    guard = StarvationGuard(cyc, be("big", 8), why="because")
    first = guard.reservation()
    assert first is not None and first.nodes == frozenset({"n2"}) and guard.avoid() == {"n2"}
    cyc.cap.take(be("x", 5).spec, Placement.of({"n2": 5}))  # later starts do not move it within the cycle
    assert guard.reservation() is first


def test_free_outside_counts_only_unblocked_nodes():
    cap = Cycle(two_nodes(running("r", {"n1": 6})), NOW, True).cap
    assert free_outside(cap, frozenset({"n2"})) == 2
    assert free_outside(cap, NO_NODES) == 10


def fair_cluster() -> Snapshot:
    # a borrows (12 of 16 GPUs); b holds 2 and its 6-GPU job fits nowhere; a's 2-GPU job would.
    jobs = [running("a1", {"n1": 6}, "a"), running("a2", {"n2": 6}, "a"), running("b1", {"n1": 2}, "b")]
    tenants = {"a": TenantUsage(1.0, 5e4), "b": TenantUsage(1.0, 0.0)}
    return two_nodes(*jobs, pending=[be("a3", 2, "a", submit=0.0), be("b2", 6, "b", submit=50.0)], tenants=tenants)


def test_with_fair_share_the_head_of_the_fair_order_gets_the_reservation():
    s = fair_cluster()
    view = FairView(s, s.tenants)
    assert [j.spec.id for j in view.heads_due(view.order(s.pending), None)] == ["b2"]
    out = {d.job_id: d for d in make_policy("fifo", starvation_threshold=None, reclaim_min_runtime=None).decide(s, NOW)}
    # b2 (within b's entitlement of 8) does not fit: n2 is reserved for it and a3 may not start there.
    assert out["b2"].reason.value == "Resources" and out["a3"].reason.value == "Reservation"
    assert out["b2"].message.startswith("fair share: project b holds 2 GPUs, below its entitlement of 8: n2 reserved")


def test_without_fair_share_or_further_from_the_entitlement_the_head_gets_none():
    s = fair_cluster()
    out = {d.job_id: d for d in make_policy("fifo", starvation_threshold=None).decide(
        Snapshot(s.nodes, s.running, s.pending), NOW)}
    assert out["a3"].__class__.__name__ == "Start"
    view = FairView(s, s.tenants)
    assert view.due(be("b3", 8, "b"))  # 10 is beyond 8, but nearer it than 2
    assert not view.due(be("b3", 12, "b"))  # 14 is further from 8 than 2 is
    assert view.heads_due([be("b3", 6, "b")], {"b3"}) == []  # skipped jobs are not the head


def three_tenants() -> Snapshot:
    # a borrows 20 of 24 GPUs; b and c each hold 2 and wait with a 6-GPU job that fits nowhere;
    # one GPU is free (on n1), where a's 1-GPU job would fit.
    nodes = [NodeCapacity(n, 8) for n in ("n1", "n2", "n3")]
    jobs = [running("a1", {"n1": 6}, "a"), running("a2", {"n2": 6}, "a"), running("a3", {"n3": 6}, "a"),
            running("a4", {"n1": 1}, "a"), running("b1", {"n2": 2}, "b"), running("c1", {"n3": 2}, "c")]
    tenants = {"a": TenantUsage(1.0, 9e4), "b": TenantUsage(1.0, 0.0), "c": TenantUsage(1.0, 0.0)}
    pending = [be("a5", 1, "a", submit=0.0), be("b2", 6, "b", submit=50.0), be("c2", 6, "c", submit=60.0)]
    return Snapshot(nodes, jobs, pending, tenants=tenants)


def test_every_tenant_below_its_part_gets_its_own_reservation_on_nodes_of_its_own():
    s = three_tenants()
    view = FairView(s, s.tenants)
    assert [j.spec.id for j in view.heads_due(view.order(s.pending), None)] == ["b2", "c2"]
    out = {d.job_id: d for d in make_policy("fifo", starvation_threshold=None, reclaim_min_runtime=None).decide(s, NOW)}
    b_msg, c_msg = out["b2"].message, out["c2"].message
    assert b_msg.startswith("fair share: project b holds 2 GPUs, below its entitlement of 8: ")
    assert c_msg.startswith("fair share: project c holds 2 GPUs, below its entitlement of 8: ")
    # b2 is reached first and takes n1, the node nearest to holding it; c2 the nearest of the rest.
    assert b_msg.endswith(": n1 reserved for it; no other job of its queue starts there until it does")
    assert ": n2 reserved for it" in c_msg
    # a5 (borrowing a's) would fit only on n1: it waits for b2's reservation.
    assert out["a5"].reason.value == "Reservation" and "n1, reserved for job b2" in out["a5"].message


def test_the_guard_reserves_in_order_and_never_twice_the_same_node():
    s = two_nodes(running("r1", {"n1": 6}), running("r2", {"n2": 3}))
    cyc = Cycle(s, NOW, True)
    guard = StarvationGuard(cyc, be("big", 8), why="first")
    guard.add(be("next", 8), why="second")
    assert guard.why_of("next") == "second" and set(guard.ids) == {"big", "next"}
    second = guard.reservation("next")  # computes the first one's before it
    first = guard.reservation("big")
    assert first is not None and first.nodes == {"n2"}
    assert second is not None and second.nodes == {"n1"}
    assert guard.avoid() == {"n1", "n2"}


def test_a_later_guarded_job_that_fits_outside_the_reserved_nodes_gets_none():
    s = two_nodes(running("r1", {"n1": 6}), running("r2", {"n2": 3}))
    guard = StarvationGuard(Cycle(s, NOW, True), be("big", 8))
    guard.add(be("small", 2))
    assert guard.reservation("small") is None and guard.avoid() == {"n2"}
