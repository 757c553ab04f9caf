"""The genetic algorithm of Pollux's cluster-wide allocation (Qiao et al.,
OSDI 2021, Section 4.2), on arrays.

A candidate allocation is a ``jobs x nodes`` matrix of GPU counts. Its value
is the power mean (``p = -1``) over jobs of each job's speedup on its row
(``speedup[j, nodes used, GPUs]``, 0 with no GPUs; plus ``1e-3`` so that a
starved job counts, heavily, instead of dividing by zero), where a job whose
row differs from the current allocation has its speedup multiplied by its
restart factor. The search keeps ``population`` candidates and, for
``generations`` rounds, makes as many children by single-point crossover
over jobs between tournament-chosen parents, mutates them (a row reset to
the current allocation with probability 0.1; in one row in ten each count
zeroed with probability 0.1; counts on nodes with free GPUs raised to a
random value up to the node's size, about one job per free node), repairs
them, and keeps the best ``population`` of parents and children.

Repair makes a candidate valid: at most one job spread over several nodes
per node (the later job in the matrix's order loses that node), at most
``max_gpus[j]`` GPUs per job (taken over the nodes in one random order per
call), and no node over its capacity (jobs earlier in the order keep theirs).
The search stops early once ``patience`` generations found nothing better.

All randomness comes from the ``numpy.random.Generator`` the caller passes:
the same generator state and inputs give the same result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scheduler.core.adaptive import power_mean

FAIRNESS_POWER = -1.0
"""The power mean's exponent (the paper's p = -1)."""
EPSILON = 1e-3


@dataclass(frozen=True)
class Problem:
    """One round's search: jobs in priority order (rows), nodes (columns)."""

    speedup: np.ndarray
    """``[job, nodes, GPUs]`` speedup tables (already scaled), 0 where not runnable."""
    max_gpus: np.ndarray
    """``[job]`` most GPUs each job may get this round."""
    base: np.ndarray
    """``[job, node]`` the current allocation."""
    restart_factor: np.ndarray
    """``[job]`` multiplier on the speedup of a job whose allocation changes."""
    capacity: np.ndarray
    """``[node]`` GPUs the adaptive jobs may use on each node."""
    power: float = FAIRNESS_POWER

    def fitness(self, states: np.ndarray) -> np.ndarray:
        """``[candidate]`` value of ``[candidate, job, node]`` states (higher is better)."""
        nodes = np.count_nonzero(states, axis=2)
        gpus = states.sum(axis=2)
        jobs = np.arange(states.shape[1])[None, :]
        s = self.speedup[jobs, np.minimum(nodes, self.speedup.shape[1] - 1),
                         np.minimum(gpus, self.speedup.shape[2] - 1)]
        changed = np.any(states != self.base[None], axis=2)
        s = s * np.where(changed, self.restart_factor[None, :], 1.0)
        return power_mean(s + EPSILON, self.power)

    def repair(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Valid candidates (see the module doc)."""
        states = states.copy()
        spread = np.count_nonzero(states, axis=2) > 1
        on = (states > 0) & spread[:, :, None]
        states[np.cumsum(on, axis=1) > 1] = 0
        order = rng.permutation(states.shape[2])
        capped = np.minimum(np.cumsum(states[:, :, order], axis=2), self.max_gpus[None, :, None])
        states[:, :, order] = np.diff(capped, axis=2, prepend=0)
        held = np.minimum(np.cumsum(states, axis=1), self.capacity[None, None, :])
        return np.diff(held, axis=1, prepend=0)

    def mutate(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Mutated copies (see the module doc)."""
        k, j, n = states.shape
        pick = rng.random((2, k, j), dtype=np.float32)
        draw = rng.random((3, k, j, n), dtype=np.float32)
        states = np.where((pick[0] < 0.1)[:, :, None], self.base[None], states)
        rows = np.where(pick[1] < 0.1, 0.1, 0.0)
        states = np.where(draw[0] < rows[:, :, None], 0, states)
        free = self.capacity[None, :] - states.sum(axis=1)
        fits = np.broadcast_to((free > 0)[:, None, :], states.shape)
        p1 = fits / np.maximum(fits.sum(axis=1, keepdims=True), 1)
        mine = (states > 0) & fits
        p2 = mine / np.maximum(mine.sum(axis=1, keepdims=True), 1)
        grow = draw[1] < p1 + p2 - p1 * p2
        top = self.capacity[None, None, :]
        raised = states + np.floor(draw[2] * (top - states + 1)).astype(states.dtype)
        return np.where(grow, np.minimum(raised, top), states)

    def crossover(self, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Children taking jobs before a random point from ``a``, the rest from ``b``."""
        points = rng.integers(0, a.shape[1], size=(a.shape[0], 1))
        first = (np.arange(a.shape[1])[None, :] < points)[:, :, None]
        return np.where(first, a, b)


def search(problem: Problem, seeds: np.ndarray, rng: np.random.Generator, population: int = 50,
           generations: int = 50, patience: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(best state, final population)`` starting from ``seeds``
    (``[k, job, node]``; the current allocation should be among them); stops
    early after ``patience`` generations without a better best."""
    pop = problem.repair(seeds, rng)
    while len(pop) < population:
        pop = np.concatenate([pop, problem.repair(problem.mutate(pop[: population - len(pop)], rng), rng)])
    pop = pop[:population]
    value = problem.fitness(pop)
    stale = 0
    for _ in range(generations):
        pick = rng.integers(0, len(pop), size=(2, 2, len(pop)))
        winners = np.where(value[pick[:, 0]] >= value[pick[:, 1]], pick[:, 0], pick[:, 1])
        children = problem.crossover(pop[winners[0]], pop[winners[1]], rng)
        children = problem.repair(problem.mutate(children, rng), rng)
        every = np.concatenate([pop, children])
        scores = np.concatenate([value, problem.fitness(children)])
        keep = np.argsort(-scores, kind="stable")[:population]
        stale = stale + 1 if scores[keep[0]] <= value[0] else 0
        pop, value = every[keep], scores[keep]
        if stale >= patience:
            break
    return pop[0], pop


def valid(problem: Problem, state: np.ndarray) -> bool:
    """True when ``state`` respects every rule repair enforces."""
    if state.min() < 0 or np.any(state.sum(axis=0) > problem.capacity):
        return False
    if np.any(state.sum(axis=1) > problem.max_gpus):
        return False
    spread = np.count_nonzero(state, axis=1) > 1
    return not np.any(((state > 0) & spread[:, None]).sum(axis=0) > 1)


__all__ = ["EPSILON", "FAIRNESS_POWER", "Problem", "search", "valid"]
