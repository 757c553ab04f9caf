"""The placement rule and free-capacity bookkeeping."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.model import Placement
from scheduler.core.placement import (
    FreeCapacity,
    FreeLedger,
    free_from_running,
    full_free,
    node_block,
    node_charges,
    spread,
)
from tests.support.snapshot_builders import nodes, pend, run


def cap_of(node_list, running=()):
    return FreeCapacity(free_from_running(node_list, running))


@pytest.mark.parametrize(
    "free_per_node, need, expected",
    [
        # Best fit: the node left with the fewest free GPUs.
        ({"a": 8, "b": 3, "c": 4}, 3, {"b": 3}),
        ({"a": 8, "b": 3, "c": 4}, 4, {"c": 4}),
        # Tie on GPUs left: node name decides.
        ({"b": 4, "a": 4}, 2, {"a": 2}),
        # Fits nowhere alone: fewest nodes, biggest blocks first, last one best fit.
        ({"a": 3, "b": 3, "c": 2, "d": 1}, 7, {"a": 3, "b": 3, "d": 1}),
        ({"a": 3, "b": 3, "c": 2, "d": 1}, 8, {"a": 3, "b": 3, "c": 2}),
        ({"a": 2, "b": 2, "c": 2}, 4, {"a": 2, "b": 2}),
        # All or nothing.
        ({"a": 3, "b": 3}, 7, None),
    ],
)
def test_gpu_placement(free_per_node, need, expected):
    node_list = nodes(*[(n, 8) for n in free_per_node])
    running = [run(f"r{n}", {n: 8 - f}) for n, f in free_per_node.items() if f < 8]
    got = cap_of(node_list, running).place(pend("j", need).spec)
    assert (dict(got.parts) if got else None) == expected


def test_preempting_jobs_still_hold_resources():
    node_list = nodes(("a", 4))
    held = run("v", {"a": 4}, preempting=True, preempted_for="t", notice=0.0, grace=30)
    assert cap_of(node_list, [held]).place(pend("j", 1).spec) is None


def test_blocked_nodes_are_skipped():
    cap = cap_of(nodes(("a", 4), ("b", 8)))
    assert dict(cap.place(pend("j", 2).spec, frozenset({"a"})).parts) == {"b": 2}
    assert cap.place(pend("j", 9).spec, frozenset({"a"})) is None


@pytest.mark.parametrize(
    "job_cpus, job_mem, expected",
    [
        (0.0, 0.0, {"a": 2}),  # no constraint: best fit by GPUs
        (8.0, 0.0, {"b": 2}),  # a has 4 free CPUs only
        (0.0, 100.0, {"b": 2}),  # a has 64 GB only
        (24.0, 0.0, {"b": 2}),  # b has 32 CPUs: fits
        (40.0, 0.0, None),  # 40 CPUs on one node nowhere; 2 GPUs split 1+1 needs 20+20: a has 4
    ],
)
def test_cpu_and_memory_constraints(job_cpus, job_mem, expected):
    node_list = nodes(("a", 4, 16.0, 128.0), ("b", 8, 32.0, 256.0))
    running = [run("r", {"a": 2}, num_cpus=12.0, mem_gb=64.0)]
    spec = pend("j", 2, num_cpus=job_cpus, mem_gb=job_mem).spec
    got = cap_of(node_list, running).place(spec)
    assert (dict(got.parts) if got else None) == expected


def test_cpu_charged_in_proportion_to_gpus_across_nodes():
    node_list = nodes(("a", 2, 10.0, 0.0), ("b", 2, 10.0, 0.0))
    spec = pend("j", 4, num_cpus=20.0).spec
    cap = cap_of(node_list)
    placement = cap.place(spec)
    assert dict(placement.parts) == {"a": 2, "b": 2}
    assert node_charges(spec, placement) == [("a", 2, 10.0, 0.0), ("b", 2, 10.0, 0.0)]
    cap.take(spec, placement)
    assert cap.cpus("a") == pytest.approx(0.0) and cap.cpus("b") == pytest.approx(0.0)
    # 10 CPUs per GPU: the GPUs left elsewhere cannot host a CPU-hungry job.
    assert cap.place(pend("k", 1, num_cpus=1.0).spec) is None


def test_cpu_limits_the_units_a_node_can_take_in_a_spread():
    # 3 GPUs free on each node but CPUs for only one more 4-CPU GPU on "a".
    node_list = nodes(("a", 4, 8.0, 0.0), ("b", 4, 16.0, 0.0))
    running = [run("r", {"a": 1, "b": 1}, num_cpus=8.0)]
    spec = pend("j", 4, num_cpus=16.0).spec
    got = cap_of(node_list, running).place(spec)
    assert dict(got.parts) == {"a": 1, "b": 3}


def test_untracked_cpu_never_limits():
    node_list = nodes(("a", 4))  # cpus=0: not tracked
    assert cap_of(node_list).place(pend("j", 4, num_cpus=1000.0).spec) is not None
    assert full_free(node_list) == {"a": (4, math.inf, math.inf)}


def test_take_updates_jointly_and_rejects_overfill():
    cap = cap_of(nodes(("a", 4)))
    spec = pend("j", 3).spec
    cap.take(spec, cap.place(spec))
    assert cap.total_gpus == 1 and cap.max_gpus == 1
    assert cap.place(pend("k", 2).spec) is None
    with pytest.raises(ValueError, match="j2: 2 GPUs do not fit on a"):
        cap.take(pend("j2", 2).spec, Placement.of({"a": 2}))


def test_zero_gpu_job_is_rejected_with_its_id():
    with pytest.raises(ValueError, match="job z: num_gpus must be >= 1"):
        cap_of(nodes(("a", 4))).place(pend("z", 0).spec)


def test_running_on_unknown_node_is_an_error():
    with pytest.raises(ValueError, match="running job r: placed on unknown node 'zz'"):
        free_from_running(nodes(("a", 4)), [run("r", {"zz": 1})])


def test_ledger_matches_a_recount_and_refuses_overfill():
    node_list = nodes(("a", 4, 16.0, 64.0), ("b", 4, 16.0, 0.0))
    jobs = [
        run("r1", {"a": 2, "b": 1}, num_cpus=9.0, mem_gb=12.0),
        run("r2", {"b": 3}, num_cpus=3.0),
    ]
    ledger = FreeLedger(node_list)
    for r in jobs:
        ledger.hold(r.spec, r.placement)
    assert_same_free(ledger.free, free_from_running(node_list, jobs))
    with pytest.raises(ValueError, match="job x: does not fit on b"):
        ledger.hold(pend("x", 1).spec, Placement.of({"b": 1}))
    ledger.release(jobs[1].spec, jobs[1].placement)
    assert_same_free(ledger.free, free_from_running(node_list, jobs[:1]))


def assert_same_free(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == pytest.approx(b[name]), name


def test_spread_uses_fewest_nodes():
    assert spread([(1, "a"), (1, "b"), (4, "c"), (3, "d")], 5) == {"c": 4, "a": 1}
    assert spread([(1, "a")], 2) is None


def _scan_best_single(cap, g, cpg, mpg, blocked):
    """The best-fit rule by its definition: least (free GPUs left, name)."""
    fits = [
        (cap.gpus[n] - g, n)
        for n in cap.gpus
        if n not in blocked and cap.gpus[n] >= g and cap.units(n, cpg, mpg) >= g
    ]
    return min(fits)[1] if fits else None


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_indexed_best_fit_total_and_max_match_a_recount(seed):
    # The free-GPU index and the running total must stay exact through claims
    # that take and that give back (a shrink returns GPUs), on nodes with and
    # without tracked CPUs.
    rng = random.Random(seed)
    free = {
        f"n{i:02d}": (rng.randint(0, 8), rng.choice([math.inf, 16.0, 64.0]), math.inf)
        for i in range(rng.randint(1, 30))
    }
    cap = FreeCapacity(free)
    names = sorted(free)
    for _ in range(60):
        g = rng.randint(1, 9)
        cpg = rng.choice([0.0, 0.0, 4.0])
        blocked = frozenset(rng.sample(names, rng.randint(0, min(3, len(names)))))
        assert cap._best_single(g, cpg, 0.0, blocked) == _scan_best_single(cap, g, cpg, 0.0, blocked)
        assert cap.total_gpus == sum(max(v, 0) for v in cap.gpus.values())
        assert cap.max_gpus == max(cap.gpus.values())
        name = rng.choice(names)
        cap.claim(name, rng.choice([1, 2, 3, -1, -2]), rng.choice([0.0, 4.0]))


# --- jobs with a 3D plan: whole tensor-parallel groups per node ----------------


@pytest.mark.parametrize(
    "free_per_node, gpus, plan, expected",
    [
        # 16 GPUs free over three nodes, but no node holds a tensor-parallel
        # group of 8: the job waits (the rule without the plan would use 7+4+5).
        ({"a": 7, "b": 4, "c": 5}, 16, "182", None),
        ({"a": 7, "b": 4, "c": 5}, 16, "", {"a": 7, "b": 4, "c": 5}),
        # Whole groups of 4: 4 GPUs of a and 4 of b, not 6 of a and 2 of c.
        ({"a": 6, "b": 6, "c": 2}, 8, "142", {"a": 4, "b": 4}),
        ({"a": 6, "b": 6, "c": 2}, 8, "ga", {"a": 6, "c": 2}),
        # Groups of 2 over nodes with odd free counts: 2 from each of a and b.
        ({"a": 3, "b": 3, "c": 1}, 4, "122", {"a": 2, "b": 2}),
        ({"a": 3, "b": 3, "c": 1}, 6, "123", None),
        # One node that holds the whole job is the best fit, as for any job.
        ({"a": 8, "b": 4, "c": 5}, 4, "141", {"b": 4}),
        # A plan whose degrees do not give the job's GPU count, or one that
        # does not parse, does not constrain the placement.
        ({"a": 3, "b": 3}, 6, "244", {"a": 3, "b": 3}),
        ({"a": 3, "b": 3}, 6, "not-a-plan", {"a": 3, "b": 3}),
    ],
)
def test_a_3d_plan_is_placed_in_whole_tensor_parallel_groups(free_per_node, gpus, plan, expected):
    node_list = nodes(*[(n, 8) for n in free_per_node])
    running = [run(f"r{n}", {n: 8 - f}) for n, f in free_per_node.items() if f < 8]
    got = cap_of(node_list, running).place(pend("j", gpus, plan=plan).spec)
    assert (dict(got.parts) if got else None) == expected


def test_a_job_that_does_not_fit_in_groups_does_not_hide_a_plain_job_of_its_size():
    # The no-fit memo is per shape; the block is part of the shape.
    cap = cap_of(nodes(("a", 8), ("b", 8)), [run("ra", {"a": 5}), run("rb", {"b": 5})])
    assert cap.place(pend("t", 6, plan="161").spec) is None
    assert dict(cap.place(pend("p", 6).spec).parts) == {"a": 3, "b": 3}


def test_node_block_is_the_tensor_parallel_degree_of_a_3d_plan_only():
    assert node_block(pend("j", 16, plan="248").spec) == 4
    assert node_block(pend("j", 8, plan="181").spec) == 8
    assert node_block(pend("j", 4, plan="zero-dp").spec) == 1
    assert node_block(pend("j", 4).spec) == 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=12),
    st.sampled_from([(1, 2, 2), (1, 4, 2), (2, 4, 1), (1, 8, 2), (2, 2, 3), (1, 3, 2), (4, 2, 2)]),
    st.sampled_from([0.0, 3.0]),
)
def test_3d_placements_keep_groups_on_nodes_and_miss_no_fit(free, degrees, cpus_per_gpu):
    # Whatever the free map: a placement gives every node a multiple of tp
    # GPUs and fits; the job is refused only when the nodes' whole groups
    # (GPUs, and CPUs where tracked) do not add up to it.
    pp, tp, dp = degrees
    g = pp * tp * dp
    node_list = nodes(*[(f"n{i:02d}", 8, 20.0, 0.0) for i in range(len(free))])
    running = [run(f"r{i}", {f"n{i:02d}": 8 - f}, num_cpus=3.0 * (8 - f)) for i, f in enumerate(free) if f < 8]
    cap = cap_of(node_list, running)
    spec = pend("j", g, plan=f"{pp}{tp}{dp}", num_cpus=cpus_per_gpu * g).spec
    got = cap.place(spec)
    groups = sum(cap.units(n, cpus_per_gpu, 0.0) // tp for n in cap.gpus)
    if got is None:
        assert groups * tp < g
        return
    assert got.num_gpus == g
    for name, k in got.parts:
        assert k % tp == 0, (name, k)
        assert k <= cap.units(name, cpus_per_gpu, 0.0)
