"""Optimus (Peng et al., EuroSys 2018) for adaptive jobs, as the Pollux study
runs it: Optimus+Oracle+TunedJobs (each job keeps its batch size; remaining
work is known exactly).

Every round, for each adaptive job:

* **Speed model.** Seconds per iteration on ``w`` GPUs,
  ``t(w) = a / w + b + c * w`` (computation shared by the workers, a fixed
  cost, communication growing with the workers), fitted by non-negative least
  squares to the job's iteration times on 1 .. ``max_gpus`` packed GPUs at
  its batch size (``AdaptiveModel.iteration_time``; counts it cannot run
  are excluded and never allocated).
* **Remaining time.** ``R * t(w)`` with ``R`` the remaining iterations
  (``AdaptiveModel.remaining_iterations``, the oracle).

Allocation, greedy by marginal gain: first one GPU per job, in order of
shortest remaining time on one GPU, while GPUs are free; then, one GPU at a
time, to the job whose remaining time drops most from one more GPU,
``R * (t(w) - t(w + 1))``, until no GPU is free or no job gains. Counts are
placed by ``adaptive_alloc.pack`` (an unchanged count keeps its nodes).
Jobs that are not adaptive start in arrival order in what is left.

Where we chose: the study fits Optimus's model online to the placements a
job has run on; ours fits it once per job to all packed GPU counts (an
Optimus that has already profiled the job). Jobs that get no GPU this round
are preempted rather than kept: the study's Optimus reassigns every GPU
each round. The first GPU goes shortest-first (Optimus leaves the order of
the first worker open).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from scipy.optimize import nnls

from scheduler.core.adaptive import AdaptiveModel
from scheduler.core.decisions import Decision
from scheduler.core.model import Snapshot
from scheduler.core.policies.adaptive_alloc import (
    AdaptiveView,
    adaptive_jobs,
    capacity,
    pack,
    plain_starts,
    to_decisions,
)


def fit_speed(model: AdaptiveModel) -> tuple[np.ndarray, tuple[int, ...]]:
    """``(theta, runnable GPU counts)`` of ``t(w) = theta . (1/w, 1, w)``."""
    ws = [w for w in range(1, model.max_gpus + 1) if math.isfinite(model.iteration_time(w))]
    if not ws:
        return np.zeros(3), ()
    x = np.array([[1.0 / w, 1.0, float(w)] for w in ws])
    y = np.array([model.iteration_time(w) for w in ws])
    theta, _ = nnls(x, y)
    return theta, tuple(ws)


def predicted(theta: np.ndarray, w: int) -> float:
    """Fitted seconds per iteration on ``w`` GPUs."""
    return float(theta[0] / w + theta[1] + theta[2] * w)


def greedy_counts(jobs: list[tuple[str, float, np.ndarray, tuple[int, ...]]], gpus: int) -> dict[str, int]:
    """GPU counts by marginal gain (see the module doc) for jobs given as
    ``(id, remaining iterations, theta, runnable counts)``."""
    counts = {jid: 0 for jid, *_ in jobs}
    first = sorted((rem * predicted(th, 1), jid) for jid, rem, th, ws in jobs if 1 in ws)
    for _, jid in first:
        if gpus == 0:
            break
        counts[jid] = 1
        gpus -= 1
    info = {jid: (rem, th, set(ws)) for jid, rem, th, ws in jobs}
    heap: list[tuple[float, str]] = []

    def push(jid: str) -> None:
        rem, th, ws = info[jid]
        w = counts[jid]
        nxt = next((k for k in range(w + 1, max(ws, default=0) + 1) if k in ws), None)
        if w and nxt is not None:
            gain = rem * (predicted(th, w) - predicted(th, nxt)) / (nxt - w)
            if gain > 0:
                heapq.heappush(heap, (-gain, jid))

    for jid in counts:
        push(jid)
    while heap and gpus > 0:
        _, jid = heapq.heappop(heap)
        rem, th, ws = info[jid]
        nxt = min(k for k in ws if k > counts[jid])
        if nxt - counts[jid] > gpus:
            continue
        gpus -= nxt - counts[jid]
        counts[jid] = nxt
        push(jid)
    return counts


class Optimus:
    """Greedy marginal-gain allocation of adaptive jobs (see the module doc)."""

    name = "optimus"
    decide_without_pending = True

    def __init__(self, explain: bool = True) -> None:
        self.explain = explain
        self._fits: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}

    def _fit(self, v: AdaptiveView) -> tuple[np.ndarray, tuple[int, ...]]:
        key = id(v.model)
        if key not in self._fits:
            self._fits[key] = fit_speed(v.model)
        return self._fits[key]

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        views = adaptive_jobs(snapshot)
        free = capacity(snapshot)
        jobs = [(v.id, v.model.remaining_iterations(v.progress), *self._fit(v)) for v in views]
        placements = pack(greedy_counts(jobs, sum(free.values())), views, free)
        return to_decisions(views, placements, "optimus") + plain_starts(snapshot, placements)


__all__ = ["Optimus", "fit_speed", "greedy_counts", "predicted"]
