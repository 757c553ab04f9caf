"""An application of the Pollux study: throughput, statistical efficiency,
goodput and progress, from its measurements (``pollux_data.AppData``).

Definitions (Qiao et al., OSDI 2021, Section 3 and 5.3; the README of
``../shared/traces/pollux/``):

* **Throughput.** One iteration at per-GPU batch ``b`` on a placement takes
  ``step_time`` seconds, ``sync_time`` of it synchronising gradients. A
  placement measured exactly (``placements.csv``, any rotation of its node
  list) is interpolated linearly in ``b``; any other is interpolated
  linearly over (nodes, GPUs, ``b``) among all measurements (placements
  averaged per (nodes, GPUs, ``b``), plus ``scalability.csv``), nodes capped
  at 16. With ``s`` gradient-accumulation steps an iteration takes
  ``step + s (step - sync)``: the extra micro-batches compute without
  synchronising.
* **Statistical efficiency.** At global batch ``M`` (``M0`` the smallest
  validated one, ``scale = M / M0``) and gradient statistics (squared norm
  ``sqr``, variance ``var``) interpolated linearly in ``M`` between the two
  validated batch sizes around it, in the current epoch, an iteration makes
  ``gain = (var + sqr) / (var / scale + sqr)`` iterations' worth of
  progress at ``M0``; the efficiency is ``gain / scale`` (1 at ``M0``).
* **Goodput** = ``gain`` / iteration time: progress per second, in
  iterations at ``M0``.
* **Progress and completion.** Epoch ``e`` ends at the smallest progress
  any validation run recorded for it; a job completes when it finishes its
  application's last epoch (``MAX_EPOCHS``: 2, 100, 80, 90, 10, 50 for bert,
  cifar10, deepspeech2, imagenet, ncf, yolov3, the study's values).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np
from scipy.interpolate import LinearNDInterpolator

from scheduler.sim.workloads.pollux_data import AppData, Measurement

MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
MAX_NODES_INTERPOLATED = 16


def canonical_placement(placement: Sequence[int]) -> tuple[int, ...]:
    """GPUs per used node, as the lexicographically smallest rotation
    (the measurements' convention: ``(2, 1)`` and ``(1, 2)`` are one placement)."""
    p = tuple(g for g in placement if g)
    if not p:
        raise ValueError("empty placement")
    return min(p[i:] + p[:i] for i in range(len(p)))


class Application:
    """Measured behaviour of one application (see the module doc)."""

    def __init__(self, data: AppData, max_epochs: int | None = None, max_local_bsz: float | None = None):
        self.name = data.name
        self.validation = data.validation
        self.init_batch_size = min(data.validation)
        self.max_batch_size = max(data.validation)
        self.min_local_bsz = min(m.local_bsz for m in data.placements)
        self.max_local_bsz = float(max_local_bsz or MAX_LOCAL_BSZ.get(data.name)
                                   or max(m.local_bsz for m in data.placements))
        self.max_epochs = int(max_epochs or MAX_EPOCHS.get(data.name) or min(map(len, data.validation.values())))
        short = [b for b, rows in data.validation.items() if len(rows) < self.max_epochs]
        if short:
            raise ValueError(f"{self.name}: validation-{short[0]}.csv has fewer than {self.max_epochs} epochs")
        exact: dict[tuple[int, ...], list[Measurement]] = {}
        for m in data.placements:
            exact.setdefault(canonical_placement(m.placement or ()), []).append(m)
        self._exact = {k: np.array(sorted((m.local_bsz, m.step_time, m.sync_time) for m in v))
                       for k, v in exact.items()}
        grouped: dict[tuple[int, int, float], list[Measurement]] = {}
        for m in data.placements:
            grouped.setdefault((m.num_nodes, m.num_replicas, m.local_bsz), []).append(m)
        points = [(*k, np.mean([m.step_time for m in v]), np.mean([m.sync_time for m in v]))
                  for k, v in grouped.items()]
        points += [(m.num_nodes, m.num_replicas, m.local_bsz, m.step_time, m.sync_time) for m in data.scalability]
        self._points = np.array(points, dtype=float)
        self._nd: LinearNDInterpolator | None = None
        self.throughput = lru_cache(maxsize=None)(self._throughput)  # type: ignore[method-assign]

    # --- throughput ---------------------------------------------------------

    def _throughput(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """``(step_time, sync_time)`` in seconds (see the module doc)."""
        key = canonical_placement(placement)
        table = self._exact.get(key)
        if table is not None:
            lo, hi = table[0, 0], table[-1, 0]
            if not lo - 1e-9 <= local_bsz <= hi + 1e-9:
                raise ValueError(f"{self.name}: per-GPU batch {local_bsz} outside the measured {lo:g}-{hi:g} "
                                 f"on placement {''.join(map(str, key))}")
            step = float(np.interp(local_bsz, table[:, 0], table[:, 1]))
            sync = float(np.interp(local_bsz, table[:, 0], table[:, 2]))
            return step, sync
        if self._nd is None:
            self._nd = LinearNDInterpolator(self._points[:, :3], self._points[:, 3:])
        x = [min(len(key), MAX_NODES_INTERPOLATED), sum(key), local_bsz]
        step, sync = (float(v) for v in self._nd([x])[0])
        if not (math.isfinite(step) and math.isfinite(sync)):
            raise ValueError(f"{self.name}: placement {''.join(map(str, key))} at per-GPU batch {local_bsz} "
                             "is outside every measurement")
        return step, sync

    def step_sync_many(self, placements: Sequence[tuple[int, ...]], local_bsz: np.ndarray) -> np.ndarray:
        """``(step_time, sync_time)`` rows for many (placement, per-GPU batch)
        pairs, as ``throughput`` gives them, in one interpolation, except that
        a measured placement at a per-GPU batch outside its measured range is
        interpolated over all measurements instead of refused; NaN where a
        pair is outside every measurement."""
        out = np.full((len(placements), 2), np.nan)
        spread: list[int] = []
        for i, (placement, b) in enumerate(zip(placements, local_bsz)):
            key = canonical_placement(placement)
            table = self._exact.get(key)
            if table is not None and table[0, 0] - 1e-9 <= b <= table[-1, 0] + 1e-9:
                out[i] = np.interp(b, table[:, 0], table[:, 1]), np.interp(b, table[:, 0], table[:, 2])
            else:
                spread.append(i)
        if spread:
            if self._nd is None:
                self._nd = LinearNDInterpolator(self._points[:, :3], self._points[:, 3:])
            x = np.array([[min(len(placements[i]), MAX_NODES_INTERPOLATED), sum(placements[i]), local_bsz[i]]
                          for i in spread], dtype=float)
            out[spread] = self._nd(x)
        return out

    def iteration_time(self, placement: Sequence[int], atomic_bsz: float, accum_steps: int) -> float:
        """Seconds per iteration with ``accum_steps`` extra micro-batches."""
        step, sync = self.throughput(canonical_placement(placement), float(atomic_bsz))
        return step + accum_steps * (step - sync)

    # --- batch size ---------------------------------------------------------

    def fixed_batch(self, batch_size: int, num_replicas: int) -> tuple[int, int]:
        """``(atomic_bsz, accum_steps)`` that run ``batch_size`` on ``num_replicas``
        GPUs: the per-GPU share, split into as few micro-batches of at most
        ``max_local_bsz`` as it takes. As the study's simulator, a single GPU
        running more than the smallest validated batch accumulates at least
        once, and the batch never exceeds the largest validated one."""
        local = math.ceil(batch_size / num_replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if num_replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.max_batch_size / (num_replicas * (accum + 1))))
        return atomic, accum

    # --- statistical efficiency and progress --------------------------------

    def _bracket(self, batch_size: float) -> tuple[int, int]:
        sizes = list(self.validation)
        if not sizes[0] <= batch_size <= sizes[-1]:
            raise ValueError(f"{self.name}: batch {batch_size} outside the validated {sizes[0]}-{sizes[-1]}")
        lower = max(b for b in sizes if b <= batch_size)
        upper = min(b for b in sizes if b >= batch_size)
        return lower, upper

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """``(grad_sqr, grad_var)`` during ``epoch`` at ``batch_size``."""
        lower, upper = self._bracket(batch_size)
        a, b = self.validation[lower][epoch], self.validation[upper][epoch]
        if lower == upper:
            return a.grad_sqr, a.grad_var
        w = (batch_size - lower) / (upper - lower)
        return (1 - w) * a.grad_sqr + w * b.grad_sqr, (1 - w) * a.grad_var + w * b.grad_var

    def gain(self, batch_size: float, epoch: int) -> float:
        """Progress (iterations at the smallest batch) one iteration makes."""
        sqr, var = self.grad_stats(batch_size, epoch)
        scale = batch_size / self.init_batch_size
        return (var + sqr) / (var / scale + sqr)

    def efficiency(self, batch_size: float, epoch: int) -> float:
        """Statistical efficiency: ``gain / scale``, 1 at the smallest batch."""
        return self.gain(batch_size, epoch) * self.init_batch_size / batch_size

    def goodput(self, placement: Sequence[int], atomic_bsz: int, accum_steps: int, epoch: int) -> float:
        """Progress per second on ``placement``."""
        batch = sum(placement) * atomic_bsz * (accum_steps + 1)
        return self.gain(batch, epoch) / self.iteration_time(placement, atomic_bsz, accum_steps)

    def progress_at(self, epoch: int) -> float:
        """Progress at the end of ``epoch`` epochs (0 for none)."""
        if epoch <= 0:
            return 0.0
        return min(rows[epoch - 1].progress for rows in self.validation.values())

    @property
    def target_progress(self) -> float:
        """Progress at which a job of this application completes."""
        return self.progress_at(self.max_epochs)


def applications(data: Mapping[str, AppData]) -> dict[str, Application]:
    """``Application`` per name."""
    return {name: Application(d) for name, d in data.items()}
