"""Pollux (Qiao et al., OSDI 2021): co-adaptive allocation of adaptive jobs.

Per job (PolluxAgent's side): on any allocation the job runs the batch size
that maximises its goodput there, ``AdaptiveModel.goodput_table`` (the
job's property; the policy reads the resulting goodput).

Cluster-wide (PolluxSched's side), every round:

* **Speedup.** A job's speedup on ``n`` nodes and ``g`` GPUs is its goodput
  there over its goodput at its fair share (``ceil(total GPUs / jobs)`` GPUs,
  capped at its maximum, on as few nodes as hold them), scaled by its GPU
  share of one node (``node GPUs / total GPUs x nodes``, as the paper's
  artifact).
* **Limits.** At most ``max(1, 2 x`` the most GPUs it has run on``)`` GPUs, as
  the paper's agent explores scale gradually, and at most its model's
  ``max_gpus``.
* **Restart penalty.** A job whose allocation changes has its speedup
  multiplied by ``max(age - restarts x 30, 0) / (age + 30)`` (``age``: seconds
  since submission; 30: the restart delay).
* **Minimum runtime.** A running job whose attempt started less than
  ``reclaim_min_runtime`` seconds ago keeps its GPUs this round and is left
  out of the search (0, the simulator's default: none is). The live loop
  passes ``SCHEDULER_RECLAIM_MIN_RUNTIME``: it decides every few seconds, not
  once a minute as the study's rounds, and a job relaunched a moment ago would
  otherwise be stopped again before it could checkpoint.
* **Search.** ``pollux_ga.search`` maximises the power mean (p = -1) of the
  jobs' speedups over allocations, from the last round's population (rows of
  jobs that are still there) and the current allocation; jobs are ordered by
  attained service (GPU-seconds held) then submission, so capacity conflicts
  favour the least served. The generator is seeded from ``seed`` and the
  round's time: a run is reproducible from its seed.

Where we chose: the artifact's NSGA-II (a second objective, cluster utility,
that its selection then ignores) becomes a single-objective elitist
genetic algorithm with the same operators; population and generations are
50 x 50 by default (the artifact's 100 x 100 costs four times as much per
round); the speedup tables use the measured throughput, not one fitted
online (see ``scheduler.sim.workloads.pollux_adaptive``). Jobs that are not
adaptive start in arrival order in the GPUs the adaptive jobs leave.
"""

from __future__ import annotations

import math

import numpy as np

from scheduler.core.adaptive import NODE_SLOTS
from scheduler.core.decisions import Decision
from scheduler.core.model import Snapshot
from scheduler.core.policies.adaptive_alloc import AdaptiveView, adaptive_jobs, capacity, plain_starts, to_decisions
from scheduler.core.policies.pollux_ga import Problem, search

RESTART_DELAY = 30.0


def restart_factor(age: float, restarts: int, delay: float = RESTART_DELAY) -> float:
    """The paper's restart penalty on a job's speedup when it is reallocated."""
    return max(age - restarts * delay, 0.0) / (age + delay)


def speedup_table(v: AdaptiveView, fair_gpus: int, scale: float, limit: int, width: int) -> np.ndarray:
    """``[nodes, GPUs]`` speedups of job ``v`` (see the module doc), zero
    above ``limit`` GPUs, padded to ``width`` GPU columns."""
    good = v.model.goodput_table(v.model.epoch(v.progress))
    fair = max(1, min(fair_gpus, good.shape[1] - 1))
    base = good[min(math.ceil(fair / NODE_SLOTS), good.shape[0] - 1), fair]
    base = base if base > 0 else max(good.max(), 1e-12)
    out = np.zeros((good.shape[0], width))
    cols = min(limit, good.shape[1] - 1) + 1
    out[:, :cols] = good[:, :cols] / base * scale
    return out


class Pollux:
    """Goodput-driven, fairness-weighted allocation (see the module doc)."""

    name = "pollux"
    #: The jobs it resizes: adaptive ones (``JobSpec.adaptive``); the others run as submitted.
    resizes = "adaptive"
    decide_without_pending = True

    def __init__(self, seed: int = 0, population: int = 50, generations: int = 50, explain: bool = True,
                 reclaim_min_runtime: float = 0.0) -> None:
        self.seed = int(seed)
        self.min_runtime = float(reclaim_min_runtime)
        self.population = int(population)
        self.generations = int(generations)
        self.explain = explain
        self._attained: dict[str, float] = {}
        self._most: dict[str, int] = {}
        self._last: float | None = None
        self._prev: tuple[list[str], np.ndarray] | None = None

    def _account(self, views: list[AdaptiveView], now: float) -> None:
        """Attained GPU-seconds and the most GPUs each job has run on: counted here from one
        round to the next, or taken from the snapshot where it counts them (the live
        cluster, whose cycles may run in any of several worker processes)."""
        span = 0.0 if self._last is None else now - self._last
        self._last = now
        for v in views:
            held = sum(v.current.values())
            self._attained[v.id] = self._attained.get(v.id, 0.0) + held * span if v.attained is None else v.attained
            self._most[v.id] = max(self._most.get(v.id, 0) if v.most_gpus is None else v.most_gpus, held)
        if len(self._attained) > 2 * len(views) + 64:
            # Forget jobs that left (completed or cancelled), so a long live run stays bounded.
            here = {v.id for v in views}
            self._attained = {j: a for j, a in self._attained.items() if j in here}
            self._most = {j: m for j, m in self._most.items() if j in here}

    def _seeds(self, ids: list[str], base: np.ndarray) -> np.ndarray:
        """The current allocation and last round's population, rows mapped by job."""
        seeds = [base[None]]
        if self._prev is not None:
            old_ids, old = self._prev
            where = {j: i for i, j in enumerate(old_ids)}
            moved = np.zeros((len(old), *base.shape), dtype=base.dtype)
            for i, j in enumerate(ids):
                if j in where:
                    moved[:, i, :] = old[:, where[j], :]
            seeds.append(moved)
        return np.concatenate(seeds)

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        views = adaptive_jobs(snapshot)
        self._account(views, now)
        if not views:
            return plain_starts(snapshot, {})
        views.sort(key=lambda v: (self._attained.get(v.id, 0.0), v.spec.submit_time, v.id))
        total = sum(n.gpus for n in snapshot.nodes)
        fair = math.ceil(total / len(views))
        kept = {v.id: v.current for v in views if v.current and now - v.started < self.min_runtime}
        views = [v for v in views if v.id not in kept]
        if not views:
            return plain_starts(snapshot, kept)
        free = capacity(snapshot)
        for held in kept.values():
            for node, g in held.items():
                free[node] -= g
        names = [n.name for n in snapshot.nodes]
        scale = len(names) / total
        width = max(v.model.max_gpus for v in views) + 1
        limits = [min(v.model.max_gpus, max(1, 2 * self._most.get(v.id, 0))) for v in views]
        speedup = np.stack([speedup_table(v, fair, scale, lim, width) for v, lim in zip(views, limits)])
        base = np.array([[v.current.get(n, 0) for n in names] for v in views], dtype=np.int16)
        factor = np.array([restart_factor(now - v.spec.submit_time, v.restarts) for v in views])
        problem = Problem(speedup, np.array(limits), base, factor, np.array([free[n] for n in names]))
        rng = np.random.default_rng([self.seed, int(now)])
        best, population = search(problem, self._seeds([v.id for v in views], base), rng,
                                  self.population, self.generations)
        self._prev = ([v.id for v in views], population)
        placements = {v.id: {names[k]: int(g) for k, g in enumerate(best[i]) if g} for i, v in enumerate(views)}
        return to_decisions(views, placements, "pollux") + plain_starts(snapshot, {**placements, **kept})


__all__ = ["Pollux", "restart_factor", "speedup_table"]
