"""Metrics on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from scheduler.core.metrics import (
    JobOutcome,
    class_metrics,
    gpu_utilization,
    makespan,
    metrics_by_class,
    percentile,
)
from scheduler.core.model import JobClass

TE, BE = JobClass.TE, JobClass.BE


def outcome(jid, klass, submit, duration, start, end, gpus=1):
    return JobOutcome(jid, klass, gpus, submit, duration, start, end)


@pytest.mark.parametrize(
    "values, q, expected",
    [
        ([1, 2, 3, 4, 5], 50, 3.0),
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4, 5], 95, 4.8),  # 0.95 * 4 = 3.8 -> 4 + 0.8 * (5 - 4)
        ([10, 20], 99, 19.9),
        ([7], 95, 7.0),
        ([1, 2, 3], 0, 1.0),
        ([1, 2, 3], 100, 3.0),
    ],
)
def test_percentile_interpolates_linearly_between_ranks(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_bad_q_is_refused():
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_class_metrics_by_hand():
    # Slowdowns 1, 2, 4; waits 0, 10, 30; JCTs 10, 20, 40.
    jobs = [
        outcome("a", TE, 0, 10, 0, 10),
        outcome("b", TE, 0, 10, 10, 20),
        outcome("c", TE, 0, 10, 30, 40),
    ]
    m = class_metrics(jobs)
    assert m.count == 3
    assert m.slowdown == pytest.approx({"p50": 2.0, "p95": 3.8, "p99": 3.96, "mean": 7 / 3})
    assert m.wait_seconds == pytest.approx({"p50": 10.0, "p95": 28.0})
    assert m.jct_seconds == pytest.approx({"mean": 70 / 3, "p50": 20.0, "p99": 39.6})


def test_slowdown_counts_from_submit_not_from_start():
    o = outcome("a", BE, 100, 50, 150, 250)  # waited 50, ran 100 (work lost to a preemption)
    assert (o.slowdown, o.wait, o.jct) == (3.0, 50.0, 150.0)


def test_metrics_by_class_splits_and_keeps_empty_classes():
    jobs = [outcome("a", BE, 0, 10, 0, 10), outcome("b", BE, 5, 10, 10, 30)]
    m = metrics_by_class(jobs)
    assert (m["BE"].count, m["all"].count, m["TE"].count) == (2, 2, 0)
    assert m["TE"].slowdown == {"p50": None, "p95": None, "p99": None, "mean": None}
    assert m["all"].slowdown["mean"] == pytest.approx((1.0 + 2.5) / 2)
    assert m["BE"].as_dict()["jct_seconds"]["p50"] == pytest.approx(17.5)


def test_makespan_and_utilization():
    jobs = [outcome("a", BE, 10, 10, 10, 20, gpus=2), outcome("b", TE, 15, 5, 30, 50)]
    assert makespan(jobs) == 40.0
    assert makespan([]) == 0.0
    # 2 GPUs x 10 s + 1 GPU x 20 s on a 4-GPU cluster over 40 s.
    assert gpu_utilization(40.0, 4, 40.0) == pytest.approx(0.25)
    assert gpu_utilization(0.0, 4, 0.0) == 0.0
    assert math.isfinite(gpu_utilization(1.0, 0, 1.0))
