"""Sampled forecasts of adaptive jobs: a running adaptive job in a forecast runs and completes by its
model (a forecast in which Pollux reconfigured one failed), and with scheduling rounds each sample is
forecast at the first round after its submission (no sample was forecast at all)."""

from __future__ import annotations

import pytest

from scheduler.core.model import JobClass, JobSpec
from scheduler.core.policy import make_policy
from scheduler.sim.cluster import make_nodes
from scheduler.sim.eta import sample_run
from scheduler.sim.records import SimConfig
from scheduler.sim.workloads.pollux_adaptive import AdaptiveApp
from scheduler.sim.workloads.pollux_app import applications
from scheduler.sim.workloads.pollux_data import load_apps
from scheduler.sim.workloads.types import SimJob
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


@pytest.fixture(scope="module")
def cifar10() -> AdaptiveApp:
    return AdaptiveApp(applications(load_apps(pollux_root() / "apps"))["cifar10"], None, max_gpus=8)


def adaptive_jobs(model: AdaptiveApp, submits: list[float]) -> list[SimJob]:
    return [SimJob(JobSpec(f"a{i}", JobClass.BE, 1, s, min_gpus=1, max_gpus=model.max_gpus, adaptive=model),
                   model.target) for i, s in enumerate(submits)]


def test_forecasts_made_while_pollux_reallocates_running_adaptive_jobs(cifar10) -> None:
    jobs = adaptive_jobs(cifar10, [10.0, 400.0, 800.0, 1200.0])
    result, samples = sample_run(make_policy("pollux"), make_nodes(1, 4), jobs, SimConfig(round_seconds=60.0), k=4,
                                 seed=0, draws=1)
    assert result.reconfigurations > 0  # running jobs were reallocated while others were forecast
    assert [s.job_id for s in samples] == ["a0", "a1", "a2", "a3"]
    assert all(s.forecast_start is not None and s.forecast_start >= s.submit_time for s in samples)


def test_with_rounds_every_sample_is_forecast_at_the_first_round_after_its_submission(cifar10) -> None:
    jobs = adaptive_jobs(cifar10, [10.0, 130.0, 250.0])
    config = SimConfig(round_seconds=60.0)
    result, samples = sample_run(make_policy("pollux"), make_nodes(1, 4), jobs, config, k=3, seed=0, draws=1)
    assert len(samples) == 3
    firsts = {o.job_id: o.first_start for o in result.outcomes}
    for s in samples:
        assert s.forecast_start is not None and s.forecast_start >= s.submit_time
        assert firsts[s.job_id] % 60.0 == 0.0  # started in a round
