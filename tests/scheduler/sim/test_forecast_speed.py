"""A reconfigurable job in a forecast runs at the speed its throughput function gives: a policy may
start it on another GPU count than requested (it failed the whole forecast before), and it ends when
that speed says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.model import JobClass, JobSpec
from scheduler.core.perf.plans import PlanError
from scheduler.core.policy import make_policy
from scheduler.sim.forecast import ForecastLimits, forecast_starts
from scheduler.sim.forecast_speed import BelievedSpeed, believed_speed

from tests.support.fake_throughput import FakeThroughput, dp_curve, elastic_spec, pending
from tests.support.snapshot_builders import nodes, pend, snap

FN = FakeThroughput({"dp": dp_curve(8.0, 8), "gc": dp_curve(10.0, 8)}, user_plan="dp", user_gpus=4)


class Exact:
    """Every job's true work: ``work[job id] - progress``."""

    def __init__(self, work):
        self.work = work

    def remaining(self, spec, progress):
        return max(self.work[spec.id] - progress, 1e-9)


def test_a_job_the_policy_starts_on_fewer_gpus_than_requested_ends_at_that_speed():
    s = snap(nodes(("n1", 8)), pending=[pending(elastic_spec("e", 4, FN, hi=8, submit=1.0)), pend("big", 8, submit=2.0)])
    (start,) = [d for d in make_policy("rubick").decide(s, 100.0) if getattr(d, "placement", None)]
    g = start.placement.num_gpus
    assert start.job_id == "e" and g != 4  # the case the forecast could not run: another count than requested
    out = forecast_starts(make_policy("rubick"), s, 100.0, Exact({"e": 3600.0, "big": 60.0}),
                          limits=ForecastLimits(step=0.0))
    assert out["e"] == 100.0
    # e's 3,600 s of work (seconds at its requested speed) at the speed of its plan on g GPUs; then big.
    assert out["big"] == pytest.approx(100.0 + 3600.0 * FN.time(start.plan, (g,)) / FN.reference())


def test_only_a_reconfigurable_job_with_a_time_for_its_request_gets_a_believed_speed():
    assert believed_speed(JobSpec("plain", JobClass.BE, 4, 0.0)) is None
    fixed = replace(elastic_spec("fixed", 4, FN, lo=4, hi=4), allowed_plans=())
    assert not fixed.reconfigurable and believed_speed(fixed) is None  # one count, one plan

    class NoRequestTime(FakeThroughput):
        def reference(self):
            raise PlanError("model fake: the user's plan dp cannot run on 4 GPUs")

    broken = NoRequestTime({"dp": dp_curve(8.0, 8)}, user_plan="dp", user_gpus=4)
    assert believed_speed(elastic_spec("broken", 4, broken, hi=8)) is None
    speed = believed_speed(elastic_spec("e", 4, FN, hi=8))
    assert isinstance(speed, BelievedSpeed) and speed.reference == FN.reference()


def test_iteration_times_come_from_the_function_and_are_never_called_measured():
    speed = BelievedSpeed(FN, FN.reference())
    assert speed.iter_time("gc", (8,), None) == (FN.time("gc", (8,)), False)
    assert speed.iter_time("dp", (4, 4), None) == (FN.time("dp", (4, 4)), False)
    assert speed.iter_time("zero-dp", (8,), None) is None  # a plan the function has no time for

    class BestOnly:
        """A throughput function that knows only its best plan per placement."""

        def best(self, placement, cpus=None):
            return ("dp", 2.0) if sum(placement) <= 8 else None

        def reference(self):
            return 4.0

    only_best = BelievedSpeed(BestOnly(), 4.0)
    assert only_best.iter_time("dp", (8,), None) == (2.0, False)
    assert only_best.iter_time("gc", (8,), None) is None
    assert only_best.iter_time("dp", (8, 8), None) is None
