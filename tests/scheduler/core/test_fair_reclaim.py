"""Fair-share reclaim: the threshold below which a tenant reclaims, and the
overshoot that lets an indivisible job bring its tenant closer to its part."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core import fair_reclaim
from scheduler.core.decisions import Pend, Preempt, Reason
from scheduler.core.fair_queue import RECLAIM_BELOW, FairView
from scheduler.core.fairshare import TenantUsage
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, Placement, RunningJob, Snapshot
from scheduler.core.policies.base import RECLAIM_MAX_PREEMPTIONS
from scheduler.core.policy import make_policy
from scheduler.core.victim_choosers import BoundedChooser
from scheduler.core.victims import HostView, Need

NOW = 100_000.0


def pend(jid: str, gpus: int, tenant: str) -> PendingJob:
    return PendingJob(JobSpec(jid, JobClass.BE, gpus, 0.0, tenant=tenant))


def run(jid: str, node: str, gpus: int, tenant: str, grace: float = 30.0, preemptions: int = 0) -> RunningJob:
    spec = JobSpec(jid, JobClass.BE, gpus, 0.0, grace_period=grace, tenant=tenant)
    return RunningJob(spec, Placement.of({node: gpus}), NOW - 3600, NOW - 3600, preemptions=preemptions)


def reclaimed(nodes, running, pending, names=("a", "b")) -> dict[str, str]:
    tenants = {t: TenantUsage(1.0, 0.0) for t in names}
    out = make_policy("fitgpp").decide(Snapshot(nodes, running, pending, tenants=tenants), NOW)
    return {d.job_id: d.for_job for d in out if isinstance(d, Preempt) and d.reason is Reason.PREEMPTED_FOR_PRIORITY}


def test_a_tenant_near_its_entitlement_does_not_reclaim():
    # 20 GPUs, a and b backlogged: 10 each. b holds 9 (0.9 of its part) and wants 1 more: no preemption.
    nodes = [NodeCapacity("n1", 10), NodeCapacity("n2", 10)]
    running = [run(f"a{i}", "n1", 1, "a") for i in range(10)] + [run("a10", "n2", 1, "a")]
    running += [run(f"b{i}", "n2", 1, "b") for i in range(9)]
    pending = [pend("b-next", 1, "b"), pend("b-more", 2, "b"), pend("a-next", 1, "a")]
    assert RECLAIM_BELOW < 0.9
    assert reclaimed(nodes, running, pending) == {}
    # Holding 8 (0.8 of its part), it takes one GPU back from a, which borrows two.
    running = [r for r in running if r.spec.id != "b8"] + [run("a11", "n2", 1, "a")]
    assert reclaimed(nodes, running, pending) == {"a0": "b-next"}


def two_tenants_one_short():
    # 16 GPUs on two nodes, entitlement 8 each. b holds 2; a holds 14 (borrows 6). b's next job needs 8:
    # it takes b beyond its part (10), yet closer to it (|10 - 8| < |2 - 8|).
    nodes = [NodeCapacity("n1", 8), NodeCapacity("n2", 8)]
    running = [run("b0", "n1", 2, "b")] + [run(f"a{i}", "n1", 2, "a", grace=5.0) for i in range(3)]
    running += [run(f"a{i}", "n2", 2, "a", grace=60.0) for i in range(3, 7)]
    return nodes, running


def test_an_indivisible_job_that_brings_its_tenant_closer_reclaims_a_whole_node():
    nodes, running = two_tenants_one_short()
    out = reclaimed(nodes, running, [pend("b-big", 8, "b"), pend("a-more", 2, "a")])
    # n1 cannot hold it (b0 is not a's to give): all of a's jobs on n2, and a keeps 6 > b's level of 2.
    assert out == {f"a{i}": "b-big" for i in range(3, 7)}


def test_an_overshoot_must_bring_its_tenant_closer_to_its_part_from_far_below():
    # 16 GPUs, a and b backlogged: 8 each; b holds ``held`` and asks for ``gpus`` more.
    def closer(held: int, gpus: int) -> bool:
        running = [run("a0", "n1", 8, "a")] + ([run("b0", "n2", held, "b")] if held else [])
        snap = Snapshot([NodeCapacity("n1", 8), NodeCapacity("n2", 8)], running,
                        [pend("a1", 8, "a"), pend("b1", 16, "b")], tenants={"a": TenantUsage(), "b": TenantUsage()})
        return FairView(snap, snap.tenants).overshoots_closer(pend("job", gpus, "b"))

    assert closer(2, 8)  # 10 is nearer 8 than 2 is
    assert not closer(4, 8)  # 12 is as far from 8 as 4: no gain for a preemption
    assert not closer(2, 6)  # within the part: the ordinary reclaim serves it


def test_one_overshoot_per_cycle_and_its_job_is_told_why_it_waits():
    # 24 GPUs, three tenants (8 each); a holds 20, b and c hold 2 each and both want 8.
    nodes = [NodeCapacity(f"n{i}", 8) for i in range(3)]
    running = [run("b0", "n0", 2, "b"), run("c0", "n0", 2, "c")] + [run("a-n0", "n0", 4, "a")]
    running += [run(f"a{n}{i}", n, 2, "a") for n in ("n1", "n2") for i in range(4)]
    tenants = {t: TenantUsage(1.0, 0.0) for t in "abc"}
    pending = [pend("b-big", 8, "b"), pend("c-big", 8, "c"), pend("a-more", 2, "a")]
    out = make_policy("fitgpp").decide(Snapshot(nodes, running, pending, tenants=tenants), NOW)
    served = {d.for_job for d in out if isinstance(d, Preempt)}
    assert len(served) == 1 and served < {"b-big", "c-big"}
    (job,) = served
    (pend_of_job,) = [d for d in out if isinstance(d, Pend) and d.job_id == job]
    assert pend_of_job.reason is Reason.WAITING_FOR_PREEMPTION and "fair share" in pend_of_job.message
    assert pend_of_job.expected_at == NOW + 30.0  # when its victims' 30 s of grace end


def test_reclaim_has_its_own_preemption_limit_whatever_the_te_limit():
    # a holds all 8 GPUs (entitlement 4); b wants 4.
    nodes = [NodeCapacity("n1", 8)]
    tenants = {"a": TenantUsage(1.0, 0.0), "b": TenantUsage(1.0, 0.0)}
    for done, taken in ((RECLAIM_MAX_PREEMPTIONS - 1, 2), (RECLAIM_MAX_PREEMPTIONS, 0)):
        running = [run(f"a{i}", "n1", 2, "a", preemptions=done) for i in range(4)]
        snap = Snapshot(nodes, running, [pend("b1", 4, "b"), pend("a-more", 2, "a")], tenants=tenants)
        # fitgpp preempts for TE jobs at most 3 times, fifo never: reclaim's limit is the same for both.
        for policy in ("fitgpp", "fifo"):
            assert len([d for d in make_policy(policy).decide(snap, NOW) if isinstance(d, Preempt)]) == taken


def test_reclaims_of_one_pass_stop_taking_jobs_larger_than_what_the_borrower_still_owes():
    # 24 GPUs, three backlogged tenants: 8 each. a holds 16 (owes 8): a 4-GPU job on n1, a 4-GPU one
    # on n2, and eight 1-GPU jobs on n3. b holds nothing and wants 4, then 4, then 1 GPU.
    nodes = [NodeCapacity(n, 8) for n in ("n1", "n2", "n3")]
    running = [run("a-four-1", "n1", 4, "a"), run("a-four-2", "n2", 4, "a")]
    running += [run(f"a-one-{i}", "n3", 1, "a", grace=600.0) for i in range(8)]
    running += [run("c0", "n1", 4, "c"), run("c1", "n2", 4, "c")]
    pending = [pend("b1", 4, "b"), pend("b2", 4, "b"), pend("b3", 1, "b"), pend("c-more", 8, "c")]
    out = reclaimed(nodes, running, pending, names=("a", "b", "c"))
    # Both 4-GPU jobs go (a owes 8); after them a owes nothing, so b3 gets none of the 1-GPU jobs.
    assert out == {"a-four-1": "b1", "a-four-2": "b2"}
    # a holds 13 (owes 5): its cheapest victim, a 4-GPU job, goes to b1; a then owes 1, so for b2 the
    # other 4-GPU job is no longer a candidate and one of the 1-GPU jobs on n3 (3 GPUs free there) is.
    running = [run("a-four-1", "n1", 4, "a"), run("a-four-2", "n2", 4, "a"), run("c0", "n1", 4, "c"),
               run("c1", "n2", 4, "c")] + [run(f"a-one-{i}", "n3", 1, "a", grace=600.0) for i in range(5)]
    out = reclaimed(nodes, running, pending, names=("a", "b", "c"))
    assert out.pop("a-four-1") == "b1" and list(out.values()) == ["b2"] and next(iter(out)).startswith("a-one-")


_RESUME_COST = fair_reclaim.ResumeCostChooser


class _ScanOnlyResumeCost:
    """The reclaim chooser without its bound: the planner scans every node per job (``single``)."""

    def __init__(self) -> None:
        self.inner = _RESUME_COST()

    def single(self, need, views, memo):  # noqa: ANN001, ANN201
        return self.inner.single(need, views, memo)

    def order(self, need, cands, nodes):  # noqa: ANN001, ANN201
        return self.inner.order(need, cands, nodes)


def _borrowed_cluster(seed: int) -> Snapshot:
    """Nodes of 8 GPUs mostly held by tenant a's BE jobs of mixed sizes and graces (many equal costs,
    so ties between nodes decide); b and c wait with jobs of several sizes."""
    rng = random.Random(seed)
    nodes = [NodeCapacity(f"n{i:02d}", 8) for i in range(rng.randint(3, 30))]
    running = []
    for node in nodes:
        used = rng.choice([0, 0, 2])
        if used:
            running.append(run(f"c-{node.name}", node.name, used, "c", grace=rng.choice([10.0, 30.0])))
        while used < 8:
            g = min(rng.choice([1, 1, 2, 4]), 8 - used)
            running.append(run(f"a{len(running):03d}", node.name, g, "a", grace=rng.choice([10.0, 30.0, 60.0]),
                               preemptions=rng.choice([0, 0, 1])))
            used += g
    pending = [pend(f"{t}{k:03d}", rng.choice([1, 2, 4, 8]), t) for k in range(rng.randint(1, 40))
               for t in [rng.choice("bc")]]
    tenants = {"a": TenantUsage(1.0, 1e6), "b": TenantUsage(rng.choice([1.0, 2.0]), 0.0), "c": TenantUsage(1.0, 10.0)}
    return Snapshot(nodes, running, pending, tenants=tenants)


def test_the_reclaim_chooser_has_the_bound():
    assert isinstance(fair_reclaim.ResumeCostChooser(), BoundedChooser)
    assert not isinstance(_ScanOnlyResumeCost(), BoundedChooser)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from(["fitgpp", "fifo", "preempt-newest"]))
def test_heap_and_scan_reclaim_the_same_victims(seed, policy):
    snap = _borrowed_cluster(seed)
    heap = make_policy(policy).decide(snap, NOW)
    original = fair_reclaim.ResumeCostChooser
    fair_reclaim.ResumeCostChooser = _ScanOnlyResumeCost  # the planner takes the scan path
    try:
        scan = make_policy(policy).decide(snap, NOW)
    finally:
        fair_reclaim.ResumeCostChooser = original
    assert heap == scan


def test_borrowed_clusters_exercise_reclaim():
    preempted = [d for seed in range(5) for d in make_policy("fitgpp").decide(_borrowed_cluster(seed), NOW)
                 if isinstance(d, Preempt) and d.reason is Reason.PREEMPTED_FOR_PRIORITY]
    assert len(preempted) >= 10


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([0.0, 10.0, 30.0])), min_size=1, max_size=6),
       st.integers(0, 4), st.sampled_from([1, 2, 4, 8]))
def test_a_reclaim_floor_is_never_above_a_rank_of_the_node(cands, free, gpus):
    # The heap searches a node only once its floor is on top: a floor above one of the node's ranks
    # would pass over the cheapest node.
    chooser = fair_reclaim.ResumeCostChooser()
    running = [run(f"r{i}", "n1", g, "a", grace=grace) for i, (g, grace) in enumerate(cands)]
    index = fair_reclaim.ReclaimIndex(Snapshot([NodeCapacity("n1", 64)], running, []), NOW, 99, 0.0, {"a": 1e9})
    view = HostView("n1", free, 0.0, 0.0, [], NOW, 0, index.by_node.get("n1", []), True)
    need = Need(pend("x", gpus, "b"), gpus, 0.0, 0.0, NOW)
    found = chooser.best_on_node(need, view, None)
    if found is not None:
        assert chooser.floor(view, NOW) <= chooser.rank(found[0], found[1], "n1")
