"""Optimus: greedy allocation by marginal gain, on a case worked by hand, and
its invariants on random clusters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Pend, Preempt, Reconfigure, Start
from scheduler.core.policies.optimus import NO_FIXED_BATCH, Optimus, fit_speed, greedy_counts, predicted
from scheduler.core.policy import simulator_only
from tests.scheduler.core.policies.adaptive_fakes import FakeModel, snapshot

def perfect(w: int) -> float:
    return 10.0 / w


def test_first_a_gpu_each_in_arrival_order_then_the_largest_drop_in_remaining_time() -> None:
    # a: 100 iterations left, b: 10, t(w) = 10 / w. Marginal gains of a second,
    # third, fourth GPU: a 100 x (10 - 5) = 500, then 100 x (5 - 3.33) = 167,
    # 100 x (3.33 - 2.5) = 83; b's second GPU gains 10 x 5 = 50 only.
    jobs = [("a", 100.0, perfect, 8), ("b", 10.0, perfect, 8)]
    assert greedy_counts(jobs, 1) == {"a": 1, "b": 0}                      # the earlier job first
    assert greedy_counts(jobs, 1, first="shortest") == {"a": 0, "b": 1}
    assert greedy_counts(jobs, 3) == {"a": 2, "b": 1}
    assert greedy_counts(jobs, 5) == {"a": 4, "b": 1}


def test_no_gpu_where_the_speed_says_it_slows_the_job_and_none_past_its_maximum() -> None:
    assert greedy_counts([("a", 100.0, lambda w: 1.0 / w + w, 8)], 8) == {"a": 1}   # best at w = 1
    assert greedy_counts([("a", 100.0, perfect, 3)], 8) == {"a": 3}


def test_unknown_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="speed"):
        Optimus(speed="guess")


def test_the_fitted_model_reproduces_iteration_times_of_its_form() -> None:
    theta, runs = fit_speed(FakeModel(max_gpus=6))    # 1 / w + 0.05 w exactly
    assert runs == (1, 2, 3, 4, 5, 6)
    assert predicted(theta, 3) == pytest.approx(1 / 3 + 0.15)


@pytest.mark.parametrize("params", [{}, {"speed": "fitted", "first": "shortest", "placement": "pack"}])
def test_decide_starts_pending_jobs_and_grows_into_free_gpus(params: dict) -> None:
    snap = snapshot(2, {"a": {"n0": 1}}, ["b"])
    decisions = Optimus(**params).decide(snap, 60.0)
    assert {type(d) for d in decisions} == {Reconfigure, Start}
    assert sum(d.placement.num_gpus for d in decisions) == 8


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(1, 4), running=st.lists(st.integers(1, 4), max_size=4),
       pending=st.integers(0, 12), max_gpus=st.integers(1, 16), speed=st.sampled_from(["measured", "fitted"]))
def test_never_more_gpus_than_exist(nodes: int, running: list[int], pending: int, max_gpus: int, speed: str) -> None:
    run = {f"r{i}": {f"n{i}": g} for i, g in enumerate(running[:nodes])}
    models = {j: FakeModel(max_gpus=max_gpus) for j in [*run, *(f"p{i}" for i in range(pending))]}
    snap = snapshot(nodes, run, [f"p{i}" for i in range(pending)], models)
    placements = apply(run, Optimus(speed=speed).decide(snap, 60.0))
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


class NoFixedBatch(FakeModel):
    """A live cluster's adaptive job: it adapts its batch, so it has no iteration time at a fixed one."""

    fixed_batch = None

    def iteration_time(self, gpus: int) -> float:
        return math.inf


def test_a_job_without_a_fixed_batch_is_told_why_it_never_starts_and_the_others_are_not() -> None:
    snap = snapshot(2, {}, ["live", "study"], {"live": NoFixedBatch(), "study": FakeModel()})
    decisions = Optimus().decide(snap, 60.0)
    (pend,) = [d for d in decisions if isinstance(d, Pend)]
    assert pend.job_id == "live" and pend.message == NO_FIXED_BATCH and "never starts under optimus" in pend.message
    assert [d.job_id for d in decisions if isinstance(d, Start)] == ["study"]


def test_optimus_says_it_is_a_simulator_policy() -> None:
    assert "fixed batch size" in simulator_only("optimus")
    assert simulator_only("pollux") is None and simulator_only("fitgpp") is None and simulator_only("nope") is None
