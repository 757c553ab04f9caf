"""Packing GPU counts onto nodes and turning a new allocation into decisions."""

from __future__ import annotations

from scheduler.core.decisions import Pend, Preempt, Reconfigure, Start
from scheduler.core.policies.adaptive_alloc import adaptive_jobs, capacity, pack, plain_starts, spread, to_decisions
from tests.scheduler.core.policies.adaptive_fakes import snapshot


def test_jobs_are_running_and_pending_adaptive_jobs_in_submission_order() -> None:
    snap = snapshot(2, {"a": {"n0": 2}}, ["b"])
    views = adaptive_jobs(snap)
    assert [v.id for v in views] == ["a", "b"]
    assert views[0].current == {"n0": 2} and views[1].current == {}
    assert capacity(snap) == {"n0": 4, "n1": 4}


def test_an_unchanged_count_keeps_its_nodes_and_the_rest_pack_tightest_first() -> None:
    snap = snapshot(3, {"a": {"n1": 2}}, ["b", "c"])
    views = adaptive_jobs(snap)
    out = pack({"a": 2, "b": 2, "c": 6}, views, capacity(snap))
    assert out["a"] == {"n1": 2}
    assert out["b"] == {"n1": 2}            # the node with exactly two free
    assert sum(out["c"].values()) == 6 and out["c"] == {"n0": 4, "n2": 2}


def test_decisions_preempt_first_then_reconfigure_start_and_pend() -> None:
    snap = snapshot(2, {"a": {"n0": 4}, "b": {"n1": 2}}, ["c", "d"])
    views = adaptive_jobs(snap)
    decisions = to_decisions(views, {"b": {"n1": 4}, "c": {"n0": 4}}, "test")
    assert isinstance(decisions[0], Preempt) and decisions[0].job_id == "a"
    kinds = {d.job_id: type(d) for d in decisions}
    assert kinds == {"a": Preempt, "b": Reconfigure, "c": Start, "d": Pend}


def test_an_unchanged_allocation_gets_no_decision() -> None:
    snap = snapshot(1, {"a": {"n0": 4}}, [])
    assert to_decisions(adaptive_jobs(snap), {"a": {"n0": 4}}, "test") == []


def test_plain_jobs_start_in_arrival_order_in_the_gpus_adaptive_jobs_leave() -> None:
    from scheduler.core.model import JobClass, JobSpec, PendingJob

    snap = snapshot(2, {}, ["a"])
    snap.pending += [PendingJob(JobSpec("p1", JobClass.BE, 4, 200.0)), PendingJob(JobSpec("p2", JobClass.BE, 2, 201.0))]
    starts = plain_starts(snap, {"a": {"n0": 2}})
    assert [(d.job_id, d.placement.num_gpus) for d in starts] == [("p1", 4), ("p2", 2)]
    assert starts[0].placement.parts == (("n1", 4),)


def test_spread_places_the_smallest_first_on_the_node_with_most_free_gpus() -> None:
    snap = snapshot(3, {"a": {"n1": 2}}, ["b", "c"])
    views = adaptive_jobs(snap)
    out = spread({"a": 2, "b": 1, "c": 6}, views, capacity(snap))
    assert out["a"] == {"n1": 2}
    assert out["b"] == {"n0": 1}                  # n0 and n2 have 4 free: the first by name
    assert out["c"] == {"n2": 4, "n0": 2}         # then n2 (4 free), then n0 (3 free)
