"""Pollux: the restart penalty, the speedup tables, and the invariants of its
decisions (never more GPUs than exist, reproducible from the seed)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Preempt, Reconfigure, Start
from scheduler.core.policies.adaptive_alloc import adaptive_jobs
from scheduler.core.policies.pollux import Pollux, restart_factor, speedup_table
from tests.scheduler.core.policies.adaptive_fakes import FakeModel, snapshot
from tests.scheduler.core.policies.test_optimus import apply


def test_restart_factor_is_the_papers() -> None:
    assert restart_factor(600.0, 0) == pytest.approx(600 / 630)
    assert restart_factor(600.0, 2) == pytest.approx(540 / 630)
    assert restart_factor(30.0, 5) == 0.0
    assert restart_factor(0.0, 0) == 0.0        # a job just submitted gains little from a restart


def test_speedup_is_goodput_over_the_fair_share_scaled_and_capped() -> None:
    view = adaptive_jobs(snapshot(1, {}, ["a"]))[0]
    table = speedup_table(view, fair_gpus=2, scale=0.25, limit=3, width=9)
    good = FakeModel().goodput_table(0)
    assert table[1, 2] == pytest.approx(0.25)                    # the fair share itself
    assert table[1, 3] == pytest.approx(good[1, 3] / good[1, 2] * 0.25)
    assert table[1, 4] == 0.0 and table.shape == (17, 9)        # above its limit


def test_a_new_job_starts_on_one_gpu_and_the_same_seed_decides_the_same() -> None:
    snap = snapshot(2, {}, ["a", "b"])
    first = Pollux(seed=7, population=16, generations=10).decide(snap, 600.0)
    again = Pollux(seed=7, population=16, generations=10).decide(snap, 600.0)
    assert first == again
    starts = [d for d in first if isinstance(d, Start)]
    assert {d.job_id for d in starts} == {"a", "b"}
    assert all(d.placement.num_gpus == 1 for d in starts)      # never more than twice what it ran on


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(1, 4), running=st.lists(st.integers(1, 4), max_size=4),
       pending=st.integers(0, 10), max_gpus=st.integers(1, 16), seed=st.integers(0, 1000))
def test_never_more_gpus_than_exist(nodes: int, running: list[int], pending: int, max_gpus: int, seed: int) -> None:
    run = {f"r{i}": {f"n{i}": g} for i, g in enumerate(running[:nodes])}
    models = {j: FakeModel(max_gpus=max_gpus) for j in [*run, *(f"p{i}" for i in range(pending))]}
    snap = snapshot(nodes, run, [f"p{i}" for i in range(pending)], models)
    decisions = Pollux(seed=seed, population=12, generations=6).decide(snap, 900.0)
    assert all(not isinstance(d, Preempt) or d.job_id in run for d in decisions)
    used: dict[str, int] = {}
    for jid, parts in apply(run, decisions).items():
        assert sum(parts.values()) <= max_gpus
        for n, g in parts.items():
            used[n] = used.get(n, 0) + g
    assert all(g <= 4 for g in used.values())
    assert all(isinstance(d, (Start, Reconfigure)) or d.__class__.__name__ in ("Preempt", "Pend") for d in decisions)


def test_a_job_younger_than_the_minimum_runtime_keeps_its_gpus() -> None:
    """The live loop decides every few seconds: a job relaunched a moment ago is not stopped again."""
    snap = snapshot(1, {"a": {"n0": 1}}, ["b"])  # "a" started at 0
    free_to_move = Pollux(seed=3, population=16, generations=10).decide(snap, 900.0)
    assert any(d.job_id == "a" for d in free_to_move)  # without a minimum, Pollux reallocates it
    young = Pollux(seed=3, population=16, generations=10, reclaim_min_runtime=1000.0).decide(snap, 900.0)
    assert not any(d.job_id == "a" for d in young)
    starts = [d for d in young if isinstance(d, Start)]
    assert [d.job_id for d in starts] == ["b"] and sum(d.placement.num_gpus for d in starts) <= 3
    old_enough = Pollux(seed=3, population=16, generations=10, reclaim_min_runtime=600.0).decide(snap, 900.0)
    assert old_enough == free_to_move
