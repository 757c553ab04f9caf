"""Adaptive jobs: what a policy may know of a job whose speed depends on its
allocation and batch size (the Pollux study's jobs, Qiao et al., OSDI 2021).

An adaptive job's work is counted in *progress*: iterations at its smallest
batch size, weighted by statistical efficiency. It completes when its progress
reaches ``target``. On an allocation it advances at its **goodput** (progress
per second): throughput at the batch size it runs times the statistical
efficiency of that batch in its current epoch. Whether it runs the batch size
its owner fixed (*TunedJobs*) or picks the goodput-optimal one for each
allocation is the job's property, not the policy's: ``goodput_table`` answers
for the job as it is.

Every allocation change (a first start included) costs ``restart_seconds``
without progress. The model is pure and memoized; the simulator's truth and
what a policy reads are the same functions (the study's policies, too, read
throughput and efficiency models that agree with the simulated job).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

NODE_SLOTS = 4
"""GPUs per node the model's tables assume (the study's cluster)."""


class AdaptiveModel(Protocol):
    """An adaptive job's behaviour (implemented by the simulator's workloads)."""

    target: float
    """Progress at which the job completes."""
    restart_seconds: float
    """Seconds without progress after every allocation change."""
    max_gpus: int
    """Most GPUs the job can use (its batch-size limits)."""
    fixed_batch: int | None
    """The batch size the job keeps; None: goodput-optimal per allocation."""

    def epoch(self, progress: float) -> int:
        """The epoch (0-based) the job is in at ``progress``."""
        ...

    def goodput_table(self, epoch: int) -> np.ndarray:
        """Goodput (progress per second) indexed ``[nodes, gpus]`` during
        ``epoch``, ``gpus`` spread as evenly as possible over ``nodes``;
        shape ``(max_nodes + 1, max_gpus + 1)``, 0 where not runnable."""
        ...

    def iteration_time(self, gpus: int) -> float:
        """Seconds per iteration on ``gpus`` packed GPUs at the fixed batch
        (what a speed model is fitted to); inf where not runnable."""
        ...

    def remaining_iterations(self, progress: float) -> float:
        """Iterations at the fixed batch from ``progress`` to ``target`` (the
        oracle of remaining work)."""
        ...


def spread_shape(nodes: int, gpus: int, slots: int = NODE_SLOTS) -> tuple[int, ...] | None:
    """``gpus`` over ``nodes`` as evenly as possible, largest first; None when
    it cannot be done with every node used and at most ``slots`` per node."""
    if nodes < 1 or gpus < nodes or gpus > nodes * slots:
        return None
    base, extra = divmod(gpus, nodes)
    return (base + 1,) * extra + (base,) * (nodes - extra)


def power_mean(values: np.ndarray, p: float, axis: int = -1) -> np.ndarray:
    """The power mean ``(mean(v ** p)) ** (1 / p)`` along ``axis``; ``p`` < 0
    weighs the smallest values most (p = -1: the harmonic mean)."""
    if p == 0:
        return np.exp(np.mean(np.log(values), axis=axis))
    return np.mean(values ** p, axis=axis) ** (1.0 / p)


__all__ = ["AdaptiveModel", "NODE_SLOTS", "power_mean", "spread_shape"]
