"""FitGpp's victim choice through the planner's per-cycle node heap gives the
same decisions as the per-job scan of ``FitGppChooser.single`` over every
feasible node (the path every other chooser takes)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt
from scheduler.core.model import JobClass, JobSpec, NodeCapacity, PendingJob, RunningJob, Snapshot
from scheduler.core.placement import FreeCapacity
from scheduler.core.policies.fitgpp import FitGpp
from scheduler.core.victim_choosers import BoundedChooser
from tests.support.policy_scenarios import scenarios


class _ScanOnly:
    """The chooser without its bound: the planner falls back to ``single``."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def single(self, need, views, memo):
        return self.inner.single(need, views, memo)

    def order(self, need, cands, nodes):
        return self.inner.order(need, cands, nodes)


class _ScanFitGpp(FitGpp):
    def make_chooser(self):
        return _ScanOnly(self._chooser)


def _busy_cluster(seed: int, te_sizes: tuple[int, ...] = (1, 1, 2, 4)) -> tuple[Snapshot, float, dict]:
    """Many nodes with few distinct grace periods (many equal bounds and
    scores, so ties between nodes decide), many TE jobs of a few shapes
    (``te_sizes`` GPUs), some jobs vacating, some preempted before."""
    rng = random.Random(seed)
    now = 50_000.0
    nodes = [NodeCapacity(f"n{i:02d}", rng.choice([4, 8]), rng.choice([0.0, 32.0]), 0.0) for i in range(rng.randint(5, 40))]
    cap = FreeCapacity({n.name: (n.gpus, n.cpus or float("inf"), float("inf")) for n in nodes})
    pending = [
        PendingJob(JobSpec(f"p{k:03d}", JobClass.TE if rng.random() < 0.7 else JobClass.BE, rng.choice(te_sizes),
                           float(k), num_cpus=rng.choice([0.0, 0.0, 8.0]), grace_period=30.0))
        for k in range(rng.randint(5, 60))
    ]
    te_ids = [p.spec.id for p in pending if p.spec.job_class is JobClass.TE]
    running = []
    for i in range(300):
        spec = JobSpec(f"r{i:03d}", JobClass.BE, rng.choice([1, 1, 2, 4]), 0.0,
                       num_cpus=rng.choice([0.0, 4.0]), grace_period=rng.choice([10.0, 30.0]))
        placement = cap.place(spec)
        if placement is None:
            continue
        if rng.random() < 0.9:  # leave a few GPUs free now and then
            cap.take(spec, placement)
        else:
            continue
        start = now - rng.uniform(100, 20_000)
        vacating = rng.random() < 0.05
        running.append(RunningJob(
            spec, placement, start, start, progress=now - start, preemptions=rng.choice([0, 0, 1, 3]),
            preempting=vacating, preempted_for=rng.choice(te_ids + [None]) if vacating and te_ids else None,
            notice_time=now - 5.0 if vacating else None,
        ))
    params = {
        "victim_weight": rng.choice([0.0, 60.0]),
        "excess_weight": rng.choice([0.0, 0.0, 10.0]),
        "loss_weight": rng.choice([0.0, 0.001]),
        "repeat_weight": rng.choice([0.0, 30.0]),
        "subset_limit": rng.choice([0, 3, 12]),
        "starvation_threshold": rng.choice([None, 100.0]),
    }
    return Snapshot(nodes, running, pending), now, params


def test_fitgpp_chooser_has_the_bound():
    assert isinstance(FitGpp().make_chooser(), BoundedChooser)
    assert not isinstance(_ScanFitGpp().make_chooser(), BoundedChooser)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_heap_and_scan_choose_the_same_victims_on_busy_clusters(seed):
    snap, now, params = _busy_cluster(seed)
    out = FitGpp(**params).decide(snap, now)
    assert out == _ScanFitGpp(**params).decide(snap, now)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_heap_and_scan_agree_on_small_snapshots(case):
    policy, params, snap, now, _ = case
    if policy != "fitgpp":
        params = {k: v for k, v in params.items() if k in ("explain", "starvation_threshold")}
    assert FitGpp(**params).decide(snap, now) == _ScanFitGpp(**params).decide(snap, now)


MULTI_NODE_SIZES = (1, 2, 6, 8, 12)
"""TE jobs larger than some or every node (of 4 or 8 GPUs): their plans span nodes."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_heap_and_scan_agree_when_plans_span_several_nodes(seed):
    # Multi-node plans take each node's potential from the heap's kept facts on the heap path and
    # from the views on the scan path: the same plans either way, as nodes change between jobs.
    snap, now, params = _busy_cluster(seed, MULTI_NODE_SIZES)
    assert FitGpp(**params).decide(snap, now) == _ScanFitGpp(**params).decide(snap, now)


def test_busy_cluster_with_large_te_jobs_makes_multi_node_plans():
    # The comparison above must see plans whose victims are on several nodes.
    def spans(seed: int) -> bool:
        snap, now, params = _busy_cluster(seed, MULTI_NODE_SIZES)
        node_of = {r.spec.id: r.placement.parts[0][0] for r in snap.running}
        nodes_for: dict[str, set[str]] = {}
        for d in FitGpp(**params).decide(snap, now):
            if isinstance(d, Preempt) and d.for_job is not None:
                nodes_for.setdefault(d.for_job, set()).add(node_of[d.job_id])
        return any(len(n) > 1 for n in nodes_for.values())

    assert sum(spans(seed) for seed in range(10)) >= 3


@pytest.mark.parametrize("seed", [3, 11])
def test_busy_cluster_exercises_preemption(seed):
    # The comparison above must see victims chosen, not only starts and pends.
    snap, now, params = _busy_cluster(seed)
    assert any(isinstance(d, Preempt) for d in FitGpp(**params).decide(snap, now))


def _one_victim_per_node_planner(graces: list[float]):
    """Full 1-GPU nodes n0..nK, each running one BE job whose grace is ``graces[i]``."""
    from scheduler.core.model import Placement
    from scheduler.core.victim_planner import Planner
    from scheduler.core.victims import RunningIndex

    now = 1_000.0
    nodes = [NodeCapacity(f"n{i}", 1, 0.0, 0.0) for i in range(len(graces))]
    cap = FreeCapacity({n.name: (0, float("inf"), float("inf")) for n in nodes})
    running = [RunningJob(JobSpec(f"r{i}", JobClass.BE, 1, 0.0, grace_period=g), Placement(((f"n{i}", 1),)), 10.0, 10.0,
                          progress=now - 10.0) for i, g in enumerate(graces)]
    planner = Planner(cap, RunningIndex(running, now, 3600.0, 3), set(), FitGpp().make_chooser())
    return planner, now


def test_excluded_nodes_are_passed_over_and_kept_for_later_jobs():
    from scheduler.core.victims import Need

    planner, now = _one_victim_per_node_planner([10.0, 20.0, 30.0])
    need = Need(PendingJob(JobSpec("te", JobClass.TE, 1, 0.0)), 1, 0.0, 0.0, now)
    ranked, view = planner._ranked, planner._shared_view
    assert ranked.best(need, view)[0].name == "n0"  # the shortest grace is the cheapest victim
    assert ranked.best(need, view, frozenset({"n0"}))[0].name == "n1"
    assert ranked.best(need, view, frozenset({"n0"}))[0].name == "n1"  # still aside for the same exclusion
    assert ranked.best(need, view, frozenset({"n0", "n1"}))[0].name == "n2"
    assert ranked.best(need, view, frozenset({"n0", "n1", "n2"})) is None
    assert ranked.best(need, view)[0].name == "n0"  # set aside, not lost


def test_a_node_set_aside_that_changes_comes_back_as_it_is_now():
    # n0 is set aside for an exclusion, then loses its candidate (a victim
    # chosen there): once no longer excluded, its old entry must not be used.
    from scheduler.core.victims import Need

    planner, now = _one_victim_per_node_planner([10.0, 20.0, 30.0])
    need = Need(PendingJob(JobSpec("te", JobClass.TE, 1, 0.0)), 1, 0.0, 0.0, now)
    ranked, view = planner._ranked, planner._shared_view
    assert ranked.best(need, view, frozenset({"n0"}))[0].name == "n1"
    from scheduler.core.victims import PreemptionPlan

    r0 = planner.index.by_node["n0"][0]
    planner.commit(need.job, PreemptionPlan({"n0": 1}, [r0], [], now + r0.grace))
    assert ranked.best(need, view, frozenset({"n0"}))[0].name == "n1"
    assert ranked.best(need, view)[0].name == "n1"  # n0 has no candidate left


def test_a_starving_jobs_reserved_nodes_get_victims_last_on_the_heap_path():
    # BE job "old" has waited past the threshold and needs 2 GPUs: it reserves a
    # node; the TE job must take its victim on another node when one works, the
    # same choice as the scan over every node.
    from scheduler.core.model import Placement

    now = 10_000.0
    nodes = [NodeCapacity(f"n{i}", 2, 0.0, 0.0) for i in range(4)]
    running = [RunningJob(JobSpec(f"r{i}", JobClass.BE, 2, 0.0, grace_period=10.0 * (i + 1)),
                          Placement(((f"n{i}", 2),)), now - 500.0 * (i + 1), now - 500.0 * (i + 1),
                          progress=500.0 * (i + 1)) for i in range(4)]
    pending = [PendingJob(JobSpec("old", JobClass.BE, 2, 0.0)), PendingJob(JobSpec("te", JobClass.TE, 1, now - 1.0))]
    snap = Snapshot(nodes, running, pending)
    params = {"starvation_threshold": 100.0}
    out = FitGpp(**params).decide(snap, now)
    assert out == _ScanFitGpp(**params).decide(snap, now)
    assert [d.job_id for d in out if isinstance(d, Preempt)] == ["r1"]  # n0, the cheapest, is reserved
    unguarded = FitGpp().decide(snap, now)
    assert [d.job_id for d in unguarded if isinstance(d, Preempt)] == ["r0"]
