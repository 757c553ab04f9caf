"""``--progress-reports``: which jobs report, what a forecast takes from their reports, and that a
forecast of a job waiting behind a reporting job follows the reports rather than the history."""

from __future__ import annotations

import math

import pytest

from scheduler.core.model import JobClass, JobSpec, Placement, RunningJob
from scheduler.core.policy import make_policy
from scheduler.core.runtime_estimate import FinishedRun, RuntimeEstimator
from scheduler.sim.cluster import make_nodes
from scheduler.sim.eta import sample_run
from scheduler.sim.forecast import ForecastLimits
from scheduler.sim.progress_reports import (MEASURED_AFTER_S, check_noise, check_share, measured_remainders, misread,
                                            reports_progress)
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.types import SimJob

BE = JobClass.BE
IDS = [f"job-{i}" for i in range(4000)]


def test_the_share_of_reporting_jobs_is_fixed_per_id_and_nested():
    assert not any(reports_progress(j, 0.0) for j in IDS)
    assert all(reports_progress(j, 1.0) for j in IDS)
    quarter = {j for j in IDS if reports_progress(j, 0.25)}
    half = {j for j in IDS if reports_progress(j, 0.5)}
    assert 0.22 < len(quarter) / len(IDS) < 0.28 and 0.47 < len(half) / len(IDS) < 0.53
    assert quarter < half  # a larger share adds jobs, never swaps them
    assert half == {j for j in IDS if reports_progress(j, 0.5)}


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, True, "0.5", None])
def test_a_share_outside_zero_to_one_is_refused_naming_the_option(bad):
    with pytest.raises(ValueError, match="--progress-reports must be a share between 0 and 1"):
        check_share(bad)


@pytest.mark.parametrize("bad", [-0.1, 3.5, math.nan, math.inf, False, "0.2"])
def test_a_noise_outside_zero_to_three_is_refused_naming_the_option(bad):
    with pytest.raises(ValueError, match="--progress-noise must be a number between 0 and 3"):
        check_noise(bad)


def test_a_misread_rate_is_a_fixed_log_normal_factor_per_job():
    assert all(misread(j, 0.0) == 1.0 for j in IDS[:50])
    factors = [misread(j, 0.3) for j in IDS]
    assert factors == [misread(j, 0.3) for j in IDS]  # fixed per job
    logs = sorted(math.log(f) for f in factors)
    assert abs(logs[len(logs) // 2]) < 0.03  # centred on the true rate
    spread = (logs[int(0.8413 * len(logs))] - logs[int(0.1587 * len(logs))]) / 2
    assert 0.27 < spread < 0.33  # one sigma either side
    # The same draw scaled: a larger sigma misreads the same jobs the same way, further.
    assert all((misread(j, 0.6) > 1) == (f > 1) for j, f in zip(IDS, factors))


def running(jid: str, attempt_start: float, progress: float, preempting: bool = False) -> RunningJob:
    return RunningJob(JobSpec(jid, BE, 1, 0.0), Placement({"n0": 1}), attempt_start, 0.0, progress,
                      preempting=preempting)


def test_only_reporting_running_jobs_with_a_measured_rate_are_taken_from_their_reports():
    now = 1000.0
    jobs = [
        running("measured", now - MEASURED_AFTER_S, 700.0),        # ran just long enough for a rate
        running("young", now - MEASURED_AFTER_S + 1.0, 900.0),    # resumed too recently for a rate
        running("vacating", 0.0, 800.0, preempting=True),          # what it has left is moot
        running("overrun", 0.0, 5000.0),                           # past its work: nothing left
    ]
    durations = {"measured": 2500.0, "young": 3000.0, "vacating": 4000.0, "overrun": 4000.0}
    out = measured_remainders(jobs, now, 1.0, durations.__getitem__)
    assert out == {"measured": 1800.0, "overrun": 0.0}
    assert measured_remainders(jobs, now, 0.0, durations.__getitem__) == {}
    # A reconfigured job's attempt runs at its own rate, which its step rate measures.
    twice = measured_remainders(jobs, now, 1.0, durations.__getitem__, rate_of=lambda jid: 2.0)
    assert twice == {"measured": 900.0, "overrun": 0.0}
    noisy = measured_remainders(jobs, now, 1.0, durations.__getitem__, noise=0.5)
    assert noisy == {"measured": pytest.approx(1800.0 * misread("measured", 0.5)), "overrun": 0.0}
    assert noisy["measured"] != 1800.0


def test_an_adaptive_job_s_progress_is_not_taken_for_seconds():
    model = object()  # any adaptive model: its progress is in the model's units
    job = RunningJob(JobSpec("adaptive", BE, 1, 0.0, min_gpus=1, max_gpus=4, adaptive=model),  # type: ignore[arg-type]
                     Placement({"n0": 1}), 0.0, 0.0, 500.0)
    assert measured_remainders([job], 1000.0, 1.0, lambda jid: 9000.0) == {}


def history_of_short_runs() -> RuntimeEstimator:
    """The owner's history says its one-GPU BE jobs run 100 s."""
    est = RuntimeEstimator()
    for _ in range(40):
        est.add(FinishedRun("u", BE, 1, 100.0))
    return est


@pytest.mark.parametrize("share, expected", [(0.0, None), (1.0, 10_000.0)])
def test_a_forecast_behind_a_reporting_job_follows_its_reports(share, expected):
    # One GPU; the long job runs 10,000 s though its owner's history says 100 s. The second job is
    # submitted at 1,000 s and can only start when the long one ends. Exact event times (``step=0``)
    # so the forecast is the long job's end to the second.
    jobs = [SimJob(JobSpec("long", BE, 1, 0.0, user="u"), 10_000.0),
            SimJob(JobSpec("next", BE, 1, 1000.0, user="u"), 50.0)]
    result, samples = sample_run(make_policy("fitgpp"), make_nodes(1, 1), jobs, SimConfig(), k=2, seed=0,
                                 limits=ForecastLimits(step=0.0), estimator=history_of_short_runs(), draws=1,
                                 progress_share=share)
    (forecast,) = [s for s in samples if s.job_id == "next"]
    assert forecast.actual_start == 10_000.0
    if expected is None:
        # From the history alone the long job, past every similar run, is taken to be near its end.
        assert forecast.forecast_start < 2000.0
    else:
        assert forecast.forecast_start == pytest.approx(expected)
