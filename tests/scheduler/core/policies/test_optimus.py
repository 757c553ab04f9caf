"""Optimus: greedy allocation by marginal gain, on a case worked by hand, and
its invariants on random clusters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.policies.optimus import Optimus, fit_speed, greedy_counts, predicted
from tests.scheduler.core.policies.adaptive_fakes import FakeModel, snapshot

PERFECT = np.array([10.0, 0.0, 0.0])     # t(w) = 10 / w
RUNS = tuple(range(1, 9))


def test_first_a_gpu_each_then_the_largest_drop_in_remaining_time() -> None:
    # a: 100 iterations left, b: 10. Marginal gains of a second, third, fourth
    # GPU: a 100 x (10 - 5) = 500, then 100 x (5 - 3.33) = 167, 100 x (3.33 - 2.5) = 83;
    # b's second GPU gains 10 x 5 = 50 only.
    jobs = [("a", 100.0, PERFECT, RUNS), ("b", 10.0, PERFECT, RUNS)]
    assert greedy_counts(jobs, 1) == {"a": 0, "b": 1}      # shortest remaining time first
    assert greedy_counts(jobs, 3) == {"a": 2, "b": 1}
    assert greedy_counts(jobs, 5) == {"a": 4, "b": 1}


def test_no_gpu_where_the_model_says_it_slows_the_job() -> None:
    slows = np.array([1.0, 0.0, 1.0])      # t(w) = 1 / w + w: best at w = 1
    assert greedy_counts([("a", 100.0, slows, RUNS)], 8) == {"a": 1}


def test_counts_the_job_cannot_run_on_are_skipped() -> None:
    assert greedy_counts([("a", 100.0, PERFECT, (1, 2, 4))], 3) == {"a": 2}
    assert greedy_counts([("a", 100.0, PERFECT, (1, 2, 4))], 4) == {"a": 4}


def test_the_fitted_model_reproduces_iteration_times_of_its_form() -> None:
    theta, runs = fit_speed(FakeModel(max_gpus=6))    # 1 / w + 0.05 w exactly
    assert runs == (1, 2, 3, 4, 5, 6)
    assert predicted(theta, 3) == pytest.approx(1 / 3 + 0.15)


def test_decide_starts_pending_jobs_and_grows_into_free_gpus() -> None:
    snap = snapshot(2, {"a": {"n0": 1}}, ["b"])
    decisions = Optimus().decide(snap, 60.0)
    assert {type(d) for d in decisions} == {Reconfigure, Start}
    assert sum(d.placement.num_gpus for d in decisions) == 8


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(1, 4), running=st.lists(st.integers(1, 4), max_size=4),
       pending=st.integers(0, 12), max_gpus=st.integers(1, 16))
def test_never_more_gpus_than_exist(nodes: int, running: list[int], pending: int, max_gpus: int) -> None:
    run = {f"r{i}": {f"n{i}": g} for i, g in enumerate(running[:nodes])}
    models = {j: FakeModel(max_gpus=max_gpus) for j in [*run, *(f"p{i}" for i in range(pending))]}
    snap = snapshot(nodes, run, [f"p{i}" for i in range(pending)], models)
    placements = apply(run, Optimus().decide(snap, 60.0))
    used: dict[str, int] = {}
    for parts in placements.values():
        assert sum(parts.values()) <= max_gpus
        for n, g in parts.items():
            used[n] = used.get(n, 0) + g
    assert all(g <= 4 for g in used.values())


def apply(run: dict[str, dict[str, int]], decisions: list) -> dict[str, dict[str, int]]:
    """GPUs per node of every job after the decisions."""
    placements = {j: dict(p) for j, p in run.items()}
    for d in decisions:
        if isinstance(d, (Start, Reconfigure)):
            placements[d.job_id] = dict(d.placement.parts)
        elif isinstance(d, Preempt):
            placements.pop(d.job_id)
    return placements
