"""Scheduling metrics per job class: slowdown, wait, job completion time.

Pure functions over per-job outcomes, shared by the simulator and (later) the
live cluster's reports. Definitions:

* slowdown = (completion - submit) / duration, where duration is the job's run
  time without interruption (so slowdown >= 1 when no work is lost);
* wait = first start - submit; JCT (job completion time) = completion - submit;
* percentiles interpolate linearly between closest ranks (numpy's default,
  "type 7"): p = v[k] + (v[k+1] - v[k]) * f with k + f = q / 100 * (n - 1);
* GPU utilization = GPU-seconds allocated to jobs (running, resuming or
  checkpointing after a notice) / (cluster GPUs x makespan);
* makespan = last completion - first submission.

A class with no jobs gets ``count == 0`` and ``None`` for every statistic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.core.model import JobClass

CLASS_KEYS = ("TE", "BE", "all")


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """How one job fared: times are on the run's clock, durations in seconds."""

    job_id: str
    job_class: JobClass
    num_gpus: int
    submit_time: float
    duration: float
    first_start: float
    completion: float
    preemptions: int = 0

    @property
    def slowdown(self) -> float:
        return (self.completion - self.submit_time) / self.duration

    @property
    def wait(self) -> float:
        return self.first_start - self.submit_time

    @property
    def jct(self) -> float:
        return self.completion - self.submit_time


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ascending values; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = q / 100.0 * (n - 1)
    k = math.floor(pos)
    f = pos - k
    if k + 1 >= n:
        return float(sorted_values[-1])
    return float(sorted_values[k] + (sorted_values[k + 1] - sorted_values[k]) * f)


def mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


@dataclass(frozen=True)
class ClassMetrics:
    """Statistics of one class (TE, BE or all)."""

    count: int
    slowdown: dict[str, float | None]
    wait_seconds: dict[str, float | None]
    jct_seconds: dict[str, float | None]

    def as_dict(self) -> dict:
        return {
            "count": self.count,
            "slowdown": dict(self.slowdown),
            "wait_seconds": dict(self.wait_seconds),
            "jct_seconds": dict(self.jct_seconds),
        }


def class_metrics(outcomes: Sequence[JobOutcome]) -> ClassMetrics:
    """Slowdown p50/p95/p99/mean, wait p50/p95 and JCT mean/p50/p99."""
    slow = sorted(o.slowdown for o in outcomes)
    wait = sorted(o.wait for o in outcomes)
    jct = sorted(o.jct for o in outcomes)
    return ClassMetrics(
        count=len(outcomes),
        slowdown={
            "p50": percentile(slow, 50),
            "p95": percentile(slow, 95),
            "p99": percentile(slow, 99),
            "mean": mean(slow),
        },
        wait_seconds={"p50": percentile(wait, 50), "p95": percentile(wait, 95)},
        jct_seconds={"mean": mean(jct), "p50": percentile(jct, 50), "p99": percentile(jct, 99)},
    )


def metrics_by_class(outcomes: Sequence[JobOutcome]) -> dict[str, ClassMetrics]:
    """``{"TE": ..., "BE": ..., "all": ...}``."""
    te = [o for o in outcomes if o.job_class is JobClass.TE]
    be = [o for o in outcomes if o.job_class is JobClass.BE]
    return {"TE": class_metrics(te), "BE": class_metrics(be), "all": class_metrics(outcomes)}


def makespan(outcomes: Sequence[JobOutcome]) -> float:
    """Last completion minus first submission (0 for no jobs)."""
    if not outcomes:
        return 0.0
    return max(o.completion for o in outcomes) - min(o.submit_time for o in outcomes)


def gpu_utilization(allocated_gpu_seconds: float, total_gpus: int, span: float) -> float:
    """Allocated GPU-seconds over the capacity of ``span`` seconds (0 when empty)."""
    if total_gpus <= 0 or span <= 0:
        return 0.0
    return allocated_gpu_seconds / (total_gpus * span)
