"""A Pollux application as an adaptive job (``scheduler.core.adaptive``).

``AdaptiveApp`` is one application run either at a fixed batch size (the
study's TunedJobs, which Optimus runs) or at the goodput-optimal batch size
for each allocation and epoch (Pollux's jobs). Jobs of one application and
batch share one instance, so its memoized tables are computed once.

Goodput on a placement during epoch ``e`` (``pollux_app`` defines throughput
and efficiency): at a fixed batch, that batch split as
``Application.fixed_batch`` splits it; adaptive, the best of 50 global batch
sizes spaced geometrically between ``max(M0, min_local_bsz x GPUs)`` and the
largest validated batch, each split as the study's simulator splits it
(accumulating at least once on one GPU above ``M0``; per-GPU batch within the
measured range). The job's progress is piecewise linear in time: constant
goodput within an epoch; ``advance`` and ``finish_seconds`` walk the epochs.

Where we chose: the study's jobs pick their batch from a throughput model
fitted online to the placements they have run on and from the gradient
statistics at their current batch; ours use the measured throughput and the
statistics at each candidate batch (the model is exact).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import lru_cache

import numpy as np

from scheduler.core.adaptive import NODE_SLOTS, spread_shape
from scheduler.sim.workloads.pollux_app import Application, canonical_placement

BATCH_CANDIDATES = 50
MAX_NODES = 16


class AdaptiveApp:
    """An application's jobs at one batch policy (see the module doc)."""

    def __init__(self, app: Application, fixed_batch: int | None, max_gpus: int | None = None,
                 restart_seconds: float = 30.0) -> None:
        self.app = app
        self.fixed_batch = fixed_batch
        self.restart_seconds = restart_seconds
        limit = self.gpu_limit(app, fixed_batch)
        self.max_gpus = max(1, min(limit, max_gpus or limit))
        self.bounds = np.array([app.progress_at(e) for e in range(app.max_epochs + 1)])
        self.target = float(self.bounds[-1])
        sizes = sorted(app.validation)
        self._sizes = np.array(sizes, dtype=float)
        self._sqr = np.array([[r.grad_sqr for r in app.validation[b][:app.max_epochs]] for b in sizes])
        self._var = np.array([[r.grad_var for r in app.validation[b][:app.max_epochs]] for b in sizes])
        self.rates = lru_cache(maxsize=None)(self._rates)  # type: ignore[method-assign]
        self.goodput_table = lru_cache(maxsize=None)(self._goodput_table)  # type: ignore[method-assign]
        self._table_rows: tuple[list[tuple[int, int]], np.ndarray, np.ndarray] | None = None

    @staticmethod
    def gpu_limit(app: Application, fixed_batch: int | None = None) -> int:
        """Most GPUs a job of ``app`` can use: its largest batch (or its fixed one) over the
        smallest per-GPU batch, at most 64."""
        limit = min(64, int(app.max_batch_size // app.min_local_bsz))
        if fixed_batch is not None:
            limit = min(limit, max(1, int(fixed_batch // app.min_local_bsz)))
        return max(1, limit)

    # --- configurations -----------------------------------------------------

    def configurations(self, gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(atomic_bsz, accum_steps, global_batch)`` the job may run on
        ``gpus`` GPUs (one row at a fixed batch); empty when none fits."""
        app = self.app
        if self.fixed_batch is not None:
            atomic, accum = app.fixed_batch(self.fixed_batch, gpus)
            if atomic < app.min_local_bsz - 1e-9:
                return np.zeros(0), np.zeros(0, dtype=int), np.zeros(0)
            return np.array([float(atomic)]), np.array([accum]), np.array([float(gpus * atomic * (accum + 1))])
        low = max(app.init_batch_size, app.min_local_bsz * gpus)
        if low > app.max_batch_size:
            return np.zeros(0), np.zeros(0, dtype=int), np.zeros(0)
        local = np.geomspace(low, app.max_batch_size, BATCH_CANDIDATES) / gpus
        accum = np.ceil(local / app.max_local_bsz - 1e-8) - 1
        if gpus == 1:
            accum = np.where(local > app.init_batch_size + 1e-8, np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - 1e-8)
        atomic = np.minimum(atomic, np.floor(app.max_batch_size / (gpus * (accum + 1))))
        ok = (atomic >= app.min_local_bsz) & (atomic <= app.max_local_bsz)
        atomic, accum = atomic[ok], accum[ok].astype(int)
        return atomic, accum, gpus * atomic * (accum + 1)

    def _gains(self, batches: np.ndarray) -> np.ndarray:
        """``gain`` per (epoch, batch): progress one iteration makes."""
        b = np.clip(batches, self._sizes[0], self._sizes[-1])
        hi = np.clip(np.searchsorted(self._sizes, b), 1, len(self._sizes) - 1) if len(self._sizes) > 1 else None
        if hi is None:
            sqr, var = self._sqr[0][:, None], self._var[0][:, None]
        else:
            lo = hi - 1
            w = (b - self._sizes[lo]) / (self._sizes[hi] - self._sizes[lo])
            sqr = (1 - w) * self._sqr[lo].T + w * self._sqr[hi].T
            var = (1 - w) * self._var[lo].T + w * self._var[hi].T
        scale = batches / self.app.init_batch_size
        return (var + sqr) / (var / scale + sqr)

    def _epoch_goodputs(self, shapes: list[tuple[int, ...]]) -> np.ndarray:
        """Best goodput per (shape, epoch); 0 where the shape cannot run."""
        rows, atomics, accums, batches = [], [], [], []
        for i, shape in enumerate(shapes):
            atomic, accum, batch = self.configurations(sum(shape))
            rows += [i] * len(atomic)
            atomics.append(atomic)
            accums.append(accum)
            batches.append(batch)
        out = np.zeros((len(shapes), self.app.max_epochs))
        if not rows:
            return out
        atomic, accum, batch = np.concatenate(atomics), np.concatenate(accums), np.concatenate(batches)
        st = self.app.step_sync_many([shapes[i] for i in rows], atomic)
        seconds = st[:, 0] + accum * (st[:, 0] - st[:, 1])
        good = self._gains(batch) / seconds  # (epochs, configurations)
        good = np.where(np.isfinite(good) & (good > 0), good, 0.0)
        np.maximum.at(out, np.array(rows), good.T)
        return out

    def best_configuration(self, shape: tuple[int, ...], epoch: int) -> tuple[int, int, int] | None:
        """``(per-GPU batch, micro-batches per step, global batch)`` with the most
        goodput on ``shape`` (GPUs per node) during ``epoch``, the one a job runs
        there (at a fixed batch: that batch's split); None when none fits."""
        atomic, accum, batch = self.configurations(sum(shape))
        if not len(atomic):
            return None
        st = self.app.step_sync_many([canonical_placement(shape)] * len(atomic), atomic)
        seconds = st[:, 0] + accum * (st[:, 0] - st[:, 1])
        good = self._gains(batch)[min(max(epoch, 0), self.app.max_epochs - 1)] / seconds
        good = np.where(np.isfinite(good) & (good > 0), good, 0.0)
        if not good.max() > 0:
            return None
        best = int(np.argmax(good))
        return int(atomic[best]), int(accum[best]) + 1, int(batch[best])

    # --- the simulator's truth ------------------------------------------------

    def _rates(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Goodput per epoch on ``shape`` and the seconds from the start of
        epoch 0 to the start of each epoch (cumulative)."""
        rates = self._epoch_goodputs([canonical_placement(shape)])[0]
        if not np.all(rates > 0):
            raise ValueError(f"{self.app.name}: cannot run on placement {shape} (batch {self.fixed_batch})")
        span = np.diff(self.bounds) / rates
        return rates, np.concatenate(([0.0], np.cumsum(span)))

    def epoch(self, progress: float) -> int:
        """The epoch (0-based) the job is in at ``progress``."""
        return min(bisect_right(self.bounds, progress) - 1, len(self.bounds) - 2)

    def _clock(self, progress: float, shape: tuple[int, ...]) -> float:
        rates, starts = self.rates(shape)
        e = self.epoch(progress)
        return starts[e] + (progress - self.bounds[e]) / rates[e]

    def finish_seconds(self, progress: float, shape: tuple[int, ...]) -> float:
        """Running seconds on ``shape`` from ``progress`` to ``target``."""
        if progress >= self.target:
            return 0.0
        return float(self.rates(shape)[1][-1] - self._clock(progress, shape))

    def advance(self, progress: float, shape: tuple[int, ...], seconds: float) -> float:
        """Progress after running ``seconds`` on ``shape`` from ``progress``."""
        if seconds <= 0 or progress >= self.target:
            return progress
        rates, starts = self.rates(shape)
        at = self._clock(progress, shape) + seconds
        if at >= starts[-1]:
            return self.target
        e = bisect_right(starts, at) - 1
        return float(min(self.bounds[e] + (at - starts[e]) * rates[e], self.target))

    # --- what a policy reads --------------------------------------------------

    def _goodput_table(self, epoch: int) -> np.ndarray:
        if self._table_rows is None:
            keys = [(n, g) for g in range(1, self.max_gpus + 1) for n in range(1, min(g, MAX_NODES) + 1)
                    if spread_shape(n, g) is not None]
            shapes = [spread_shape(n, g) or () for n, g in keys]
            self._table_rows = (keys, np.array(keys), self._epoch_goodputs(shapes))
        keys, index, good = self._table_rows
        table = np.zeros((MAX_NODES + 1, self.max_gpus + 1))
        table[index[:, 0], index[:, 1]] = good[:, min(epoch, good.shape[1] - 1)]
        return table

    def iteration_time(self, gpus: int) -> float:
        """Seconds per iteration on ``gpus`` packed GPUs at the fixed batch."""
        if self.fixed_batch is None or not 1 <= gpus <= self.max_gpus:
            return math.inf
        full, rest = divmod(gpus, NODE_SLOTS)
        shape = (NODE_SLOTS,) * full + ((rest,) if rest else ())
        atomic, accum, _ = self.configurations(gpus)
        if not len(atomic):
            return math.inf
        st = self.app.step_sync_many([shape], atomic)[0]
        seconds = float(st[0] + accum[0] * (st[0] - st[1]))
        return seconds if math.isfinite(seconds) and seconds > 0 else math.inf

    def remaining_iterations(self, progress: float) -> float:
        """Iterations at the fixed batch from ``progress`` to ``target``."""
        if self.fixed_batch is None or progress >= self.target:
            return 0.0
        gains = self._gains(np.array([float(self.fixed_batch)]))[:, 0]
        e = self.epoch(progress)
        rest = (self.bounds[e + 1] - progress) / gains[e]
        return float(rest + np.sum(np.diff(self.bounds)[e + 1:] / gains[e + 1:]))
