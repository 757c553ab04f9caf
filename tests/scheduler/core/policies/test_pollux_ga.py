"""The genetic algorithm: every candidate it returns is a valid allocation,
the same seed gives the same result, and it never does worse than the
current allocation it starts from."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.policies.pollux_ga import Problem, search, valid


@st.composite
def problems(draw):
    jobs = draw(st.integers(1, 6))
    nodes = draw(st.integers(1, 4))
    cap = np.array(draw(st.lists(st.integers(0, 4), min_size=nodes, max_size=nodes)))
    limits = np.array(draw(st.lists(st.integers(1, 8), min_size=jobs, max_size=jobs)))
    speed = np.zeros((jobs, nodes + 1, 9))
    for j in range(jobs):
        for n in range(1, nodes + 1):
            for g in range(n, 9):
                speed[j, n, g] = g ** draw(st.sampled_from([0.5, 0.8, 1.0])) * 0.9 ** (n - 1)
    factor = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=jobs, max_size=jobs)))
    zero = np.zeros((jobs, nodes), dtype=np.int16)
    problem = Problem(speed, limits, zero, factor, cap)
    base = problem.repair(np.array(draw(st.lists(
        st.lists(st.integers(0, 4), min_size=nodes, max_size=nodes), min_size=jobs, max_size=jobs)),
        dtype=np.int16)[None], np.random.default_rng(0))[0]
    return Problem(speed, limits, base, factor, cap)


@settings(max_examples=40, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**16))
def test_the_result_is_valid_reproducible_and_no_worse_than_the_start(problem: Problem, seed: int) -> None:
    best, population = search(problem, problem.base[None], np.random.default_rng(seed), 12, 8)
    assert valid(problem, best)
    assert all(valid(problem, s) for s in population)
    again, _ = search(problem, problem.base[None], np.random.default_rng(seed), 12, 8)
    assert np.array_equal(best, again)
    assert problem.fitness(best[None])[0] >= problem.fitness(problem.base[None])[0] - 1e-12


def test_repair_enforces_capacity_the_job_limit_and_one_spread_job_per_node() -> None:
    speed = np.ones((2, 3, 9))
    problem = Problem(speed, np.array([3, 8]), np.zeros((2, 2), dtype=np.int16), np.ones(2), np.array([4, 4]))
    state = np.array([[[4, 4], [2, 2]]], dtype=np.int16)       # both spread, over capacity, job 0 over its limit
    fixed = problem.repair(state, np.random.default_rng(1))[0]
    assert valid(problem, fixed)
    assert fixed[0].sum() == 3


def test_a_starved_job_weighs_on_the_power_mean() -> None:
    speed = np.zeros((2, 2, 5))
    speed[:, 1, 1:] = [1.0, 2.0, 3.0, 4.0]
    problem = Problem(speed, np.array([4, 4]), np.zeros((2, 1), dtype=np.int16), np.ones(2), np.array([4]))
    fair = problem.fitness(np.array([[[2], [2]]]))[0]
    greedy = problem.fitness(np.array([[[4], [0]]]))[0]
    assert fair > greedy          # harmonic mean: 2 and 2 beat 4 and nothing
