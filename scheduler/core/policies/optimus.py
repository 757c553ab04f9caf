"""Optimus (Peng et al., EuroSys 2018) for adaptive jobs, as the Pollux study
runs it: Optimus+Oracle+TunedJobs (each job keeps its batch size; remaining
work is known exactly).

Every round, for each adaptive job:

* **Speed.** Seconds per iteration on ``w`` GPUs at its batch, ``t(w)``:
  ``speed="measured"`` (default) reads the measured iteration time on ``w``
  packed GPUs (``AdaptiveModel.iteration_time``), as the study's Optimus
  code does; ``speed="fitted"`` fits ``t(w) = a / w + b + c * w``
  (computation shared by the workers, a fixed cost, communication growing
  with the workers) by non-negative least squares to those times, as the
  Optimus paper fits its model.
* **Remaining time.** ``R * t(w)`` with ``R`` the remaining iterations
  (``AdaptiveModel.remaining_iterations``, the oracle).

Allocation, greedy by marginal gain: first one GPU per job, in arrival order
(``first="shortest"``: shortest remaining time on one GPU first), while GPUs
are free; then, one GPU at a time, to the job whose remaining time drops most
from one more GPU, ``R * (t(w) - t(w + 1))``, up to its ``max_gpus``, until no
GPU is free or no job gains. Placement (``placement="spread"``, default, the
study's): an unchanged count keeps its nodes, the other jobs, smallest first,
take GPUs from the node with the most free GPUs again and again
(``adaptive_alloc.spread``); ``placement="pack"``: best fit on one node.
Jobs that are not adaptive start in arrival order in what is left.

Where we chose: remaining iterations are counted from the job's progress
(the study's code counts from the start of its current epoch, by the
validation runs' iteration counts); jobs that get no GPU are preempted (the
study's Optimus, too, reassigns every GPU each round).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable

import numpy as np
from scipy.optimize import nnls

from scheduler.core.adaptive import AdaptiveModel
from scheduler.core.decisions import Decision, Pend
from scheduler.core.model import Snapshot
from scheduler.core.policies.adaptive_alloc import (
    AdaptiveView,
    adaptive_jobs,
    capacity,
    pack,
    plain_starts,
    spread,
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


SpeedFn = Callable[[int], float]


def greedy_counts(jobs: list[tuple[str, float, SpeedFn, int]], gpus: int, first: str = "arrival") -> dict[str, int]:
    """GPU counts by marginal gain (see the module doc) for jobs given as
    ``(id, remaining iterations, seconds per iteration on w GPUs, most GPUs)``
    in arrival order; ``first="shortest"`` hands the first GPUs out by
    shortest remaining time on one GPU instead."""
    counts = {jid: 0 for jid, *_ in jobs}
    order = jobs if first == "arrival" else sorted(jobs, key=lambda j: (j[1] * j[2](1), j[0]))
    for jid, _, t, top in order:
        if gpus == 0:
            break
        if top >= 1 and math.isfinite(t(1)):
            counts[jid] = 1
            gpus -= 1
    info = {jid: (rem, t, top) for jid, rem, t, top in jobs}
    heap: list[tuple[float, int, str]] = []
    rank = {jid: i for i, (jid, *_) in enumerate(jobs)}

    def push(jid: str) -> None:
        rem, t, top = info[jid]
        w = counts[jid]
        if w and w < top:
            gain = rem * (t(w) - t(w + 1))
            if gain > 0:
                heapq.heappush(heap, (-gain, rank[jid], jid))

    for jid in counts:
        push(jid)
    while heap and gpus > 0:
        _, _, jid = heapq.heappop(heap)
        counts[jid] += 1
        gpus -= 1
        push(jid)
    return counts


#: Why a job Optimus cannot run waits: the study's jobs have a fixed batch, the live cluster's adapt theirs.
NO_FIXED_BATCH = ("optimus has no iteration time for this job on any GPU count: it runs adaptive jobs at a fixed "
                  "batch size (the Pollux study's TunedJobs), which jobs on a live cluster do not have, so the job "
                  "never starts under optimus (pollux adapts its batch)")


class Optimus:
    """Greedy marginal-gain allocation of adaptive jobs (see the module doc)."""

    name = "optimus"
    #: The jobs it resizes: adaptive ones (``JobSpec.adaptive``); the others run as submitted.
    resizes = "adaptive"
    decide_without_pending = True
    simulator_only = ("it runs adaptive jobs at the fixed batch size of a trace with their remaining work known "
                      "exactly (the Pollux study's Optimus+Oracle+TunedJobs); live adaptive jobs adapt their batch, "
                      "so they would never start")

    def __init__(self, speed: str = "measured", first: str = "arrival", placement: str = "spread",
                 explain: bool = True) -> None:
        if speed not in ("measured", "fitted") or first not in ("arrival", "shortest") or \
                placement not in ("spread", "pack"):
            raise ValueError("speed: measured|fitted, first: arrival|shortest, placement: spread|pack")
        self.speed, self.first, self.placement = speed, first, placement
        self.explain = explain
        self._speeds: dict[int, tuple[SpeedFn, int]] = {}

    def _speed(self, v: AdaptiveView) -> tuple[SpeedFn, int]:
        """Seconds per iteration on w GPUs, and the most GPUs the job may use."""
        key = id(v.model)
        if key not in self._speeds:
            model = v.model
            if self.speed == "fitted":
                theta, runs = fit_speed(model)
                top = max(runs, default=0)
                self._speeds[key] = (lambda w: predicted(theta, w) if w in runs else math.inf), top
            else:
                times = [model.iteration_time(w) for w in range(1, model.max_gpus + 1)]
                self._speeds[key] = (lambda w: times[w - 1] if 1 <= w <= len(times) else math.inf), len(times)
        return self._speeds[key]

    def decide(self, snapshot: Snapshot, now: float) -> list[Decision]:
        views = adaptive_jobs(snapshot)
        free = capacity(snapshot)
        jobs = [(v.id, v.model.remaining_iterations(v.progress), *self._speed(v)) for v in views]
        counts = greedy_counts(jobs, sum(free.values()), self.first)
        placements = (pack if self.placement == "pack" else spread)(counts, views, free)
        decisions = to_decisions(views, placements, "optimus") + plain_starts(snapshot, placements)
        unrunnable = {jid for jid, _, t, top in jobs if not any(math.isfinite(t(w)) for w in range(1, top + 1))}
        if unrunnable:
            decisions = [Pend(d.job_id, d.reason, NO_FIXED_BATCH) if isinstance(d, Pend) and d.job_id in unrunnable
                         else d for d in decisions]
        return decisions


__all__ = ["Optimus", "fit_speed", "greedy_counts", "predicted"]
