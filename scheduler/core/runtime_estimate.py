"""How long a job will run: estimated from its owner's history of similar jobs.

Start-time forecasts (``scheduler.sim.forecast``) need each running and
pending job's remaining run time, which no scheduler knows. Users' time limits
are the classic answer (Slurm's ``squeue --start``), but limits are padded and
often absent, so the estimate here prefers history and uses the limit as a cap:

1. the owner's last ``window`` finished jobs of the same class and GPU count,
   when there are at least ``min_runs`` of them;
2. else the owner's last finished jobs of the same class (as many);
3. else everyone's last finished jobs of the same class, as many or fewer:
   however few, they say more than a constant (a new cluster's first forecasts
   would otherwise give every job the default below, hours for a job that
   has run for seconds each time before);
4. else (no job of the class has finished) the job's time limit; else, for
   a running job, as long again as it has run (at least ``minimum``): the
   median of what is left of a run of which nothing is known but that it
   has lasted this long, which a forecast corrects as the job goes on
   (a constant, hours, made a new cluster forecast its first waiting job
   hours ahead behind jobs of a minute); else ``default[class]``.

``min_runs`` is 30: a quantile read from a handful of runs is mostly noise,
and the wider history does better until the owner's own has that many
(measured on the forecasts, docs/results.md: 5, 15, 30 and 60 runs).

Whatever the source, a declared time limit caps the estimate (the job is
stopped there). The *owner* is the job's user, or its tenant when the job
names no user (the Philly trace has virtual clusters but no users).

A running job that has already worked ``progress`` seconds has a remaining
time of ``r - progress`` for one ``r`` of the similar runs longer than
``progress`` (which one: below): the history conditioned on what the job has
already survived. When no similar
run lasted that long, the remaining time is the time limit's rest if any,
else a quarter of the work done so far (at least ``minimum``): a job that has
outlived its history is taken to be near its end, but not at it.

A running job that reports its own progress (steps done, total steps) says
better than any history how long it has left: :class:`WithReported` takes
those measured remainders and asks the history only for the other jobs.

Which of the similar runs a job is taken to be like is a fixed draw per job
(``spread``), not the median: a forecast built on medians has every job end at
the same typical time, and the first of many completions, which decides when
a waiting job starts, comes far too late. One set of draws is one possible
future; ``drawn(k)`` gives the same history with the draws of set ``k``, so a
forecast can take each job's median start over several futures.

Pure: no clock, no randomness, no I/O; the caller feeds finished runs in the
order they finished.
"""

from __future__ import annotations

import copy
import zlib
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from typing import Mapping, Protocol

from scheduler.core.model import JobClass, JobSpec

DEFAULT_RUNTIME: Mapping[JobClass, float] = {JobClass.TE: 900.0, JobClass.BE: 4 * 3600.0}
"""Run time of a job nothing is known about: no history, no time limit."""


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A finished job as the estimator learns from it: owner, class, GPUs and
    the seconds of work it needed."""

    owner: str
    job_class: JobClass
    num_gpus: int
    runtime: float


class RuntimeEstimate(Protocol):
    """What a forecast needs to know of run times."""

    def remaining(self, spec: JobSpec, progress: float) -> float:
        """Seconds of work left (> 0) for a job that has done ``progress``."""
        ...


def with_draw(estimator: RuntimeEstimate, draw: int) -> RuntimeEstimate:
    """``estimator.drawn(draw)`` when it draws (``RuntimeEstimator``), else ``estimator`` itself."""
    drawn = getattr(estimator, "drawn", None)
    return drawn(draw) if drawn is not None else estimator


def owner_of(spec: JobSpec) -> str:
    """The job's user, or its tenant when it names no user."""
    return spec.user or spec.tenant


class RuntimeEstimator:
    """Run-time estimates from a rolling window of finished jobs (see module doc)."""

    def __init__(self, window: int = 300, default: Mapping[JobClass, float] = DEFAULT_RUNTIME,
                 minimum: float = 60.0, min_runs: int = 30) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.default = dict(default)
        self.minimum = minimum
        self.min_runs = min_runs
        self._runs: dict[tuple, deque[float]] = {}
        self._ordered: dict[tuple, list[float]] = {}
        self._draw = 0

    def drawn(self, draw: int) -> RuntimeEstimator:
        """This estimator with the per-job draws of set ``draw`` (0: the usual ones). It shares
        the history: runs added to either are seen by both."""
        other = copy.copy(self)
        other._draw = draw
        return other

    def add(self, run: FinishedRun) -> None:
        """Learn from one finished job."""
        for key in ((run.owner, run.job_class, run.num_gpus), (run.owner, run.job_class), (run.job_class,)):
            runs = self._runs.get(key)
            if runs is None:
                runs = self._runs[key] = deque(maxlen=self.window)
            runs.append(run.runtime)
            self._ordered.pop(key, None)

    def _similar(self, spec: JobSpec) -> tuple[deque[float], tuple] | None:
        """The most specific history for ``spec`` with at least ``min_runs`` runs, else the
        class's whatever its size if it has any (module doc), and its key; None without any."""
        owner = owner_of(spec)
        for key in ((owner, spec.job_class, spec.num_gpus), (owner, spec.job_class), (spec.job_class,)):
            runs = self._runs.get(key)
            if runs and len(runs) >= self.min_runs:
                return runs, key
        widest = (spec.job_class,)
        runs = self._runs.get(widest)
        return (runs, widest) if runs else None

    def total(self, spec: JobSpec) -> float:
        """Estimated seconds of work the whole job needs (> 0)."""
        return self.remaining(spec, 0.0)

    def remaining(self, spec: JobSpec, progress: float) -> float:
        """Estimated seconds of work left for a job that has done ``progress`` (> 0)."""
        found = self._similar(spec)
        rest: float | None = None
        if found is not None:
            runs = self._sorted(*found)
            longer = runs[bisect_right(runs, progress):]
            if longer:
                rest = longer[int(spread(spec.id, self._draw) * len(longer))] - progress
        elif spec.time_limit:
            rest = spec.time_limit - progress if spec.time_limit > progress else None
        elif progress > 0:
            rest = max(self.minimum, progress)
        else:
            rest = self.default[spec.job_class]
        if rest is None:
            rest = max(self.minimum, 0.25 * progress)
        if spec.time_limit:
            rest = min(rest, max(spec.time_limit - progress, 1.0))
        return max(rest, 1.0)

    def _sorted(self, runs: deque[float], key: tuple) -> list[float]:
        cached = self._ordered.get(key)
        if cached is None:
            cached = self._ordered[key] = sorted(runs)
        return cached


def spread(job_id: str, draw: int = 0) -> float:
    """A fixed number in [0, 1) per job id and set of draws, evenly spread over many ids (CRC-32)."""
    key = job_id if not draw else f"{draw}:{job_id}"
    return zlib.crc32(key.encode()) / 2**32


class WithReported:
    """``fallback``'s estimates, except for the jobs in ``reported``: their seconds left as their
    own progress reports measured them (steps left at the measured step rate), capped by the
    time limit like any estimate. Keys are job ids as in ``JobSpec.id``."""

    def __init__(self, fallback: RuntimeEstimate, reported: Mapping[str, float]) -> None:
        self.fallback = fallback
        self.reported = dict(reported)

    def drawn(self, draw: int) -> WithReported:
        """The fallback's draws of set ``draw`` (``RuntimeEstimator.drawn``); the measured
        remainders are the same in every set."""
        return WithReported(with_draw(self.fallback, draw), self.reported)

    def remaining(self, spec: JobSpec, progress: float) -> float:
        """The measured remainder of ``spec`` if it has one, else the fallback's (> 0 either way)."""
        left = self.reported.get(spec.id)
        if left is None:
            return self.fallback.remaining(spec, progress)
        if spec.time_limit:
            left = min(left, max(spec.time_limit - progress, 1.0))
        return max(left, 1.0)
