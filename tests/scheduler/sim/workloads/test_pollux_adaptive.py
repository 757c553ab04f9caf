"""Adaptive Pollux jobs: goodput per epoch from the measurements, progress
walked epoch by epoch, the batch a job picks, and the loader."""

from __future__ import annotations

import pytest

from scheduler.sim.workloads.pollux import RESTART_SECONDS, load_pollux_adaptive, tuned_duration
from scheduler.sim.workloads.pollux_adaptive import AdaptiveApp
from scheduler.sim.workloads.pollux_app import applications
from scheduler.sim.workloads.pollux_data import load_apps
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


@pytest.fixture(scope="module")
def apps() -> dict:
    return applications(load_apps(pollux_root() / "apps"))


def test_a_fixed_batch_job_takes_the_tunedjobs_time(apps) -> None:
    bert = AdaptiveApp(apps["bert"], 384)
    assert bert.finish_seconds(0.0, (4, 4)) + RESTART_SECONDS == pytest.approx(tuned_duration(apps["bert"], 8, 384))


def test_progress_advances_at_each_epochs_goodput(apps) -> None:
    app = apps["bert"]
    job = AdaptiveApp(app, 384)
    atomic, accum = app.fixed_batch(384, 8)
    g0 = app.goodput((4, 4), atomic, accum, 0)
    g1 = app.goodput((4, 4), atomic, accum, 1)
    first = app.progress_at(1)
    assert job.advance(0.0, (4, 4), 10.0) == pytest.approx(10.0 * g0)
    assert job.advance(0.0, (4, 4), first / g0 + 5.0) == pytest.approx(first + 5.0 * g1)
    assert job.epoch(first + 1e-6) == 1 and job.epoch(0.0) == 0
    middle = job.advance(0.0, (4, 4), 100.0)
    assert job.advance(middle, (4, 4), job.finish_seconds(middle, (4, 4))) == pytest.approx(job.target)


def test_an_adaptive_job_runs_the_best_of_its_candidate_batches(apps) -> None:
    app = apps["cifar10"]
    job = AdaptiveApp(app, None)
    atomic, accum, _ = job.configurations(2)
    best = max(app.goodput((2,), int(a), int(s), 3) for a, s in zip(atomic, accum))
    assert job.goodput_table(3)[1, 2] == pytest.approx(best)
    fixed = AdaptiveApp(app, 128)
    assert job.goodput_table(3)[1, 2] >= fixed.rates((2,))[0][3]


def test_remaining_iterations_and_iteration_time_at_the_fixed_batch(apps) -> None:
    app = apps["bert"]
    job = AdaptiveApp(app, 384)
    by_hand = sum((app.progress_at(e + 1) - app.progress_at(e)) / app.gain(384, e) for e in range(2))
    assert job.remaining_iterations(0.0) == pytest.approx(by_hand)
    atomic, accum = app.fixed_batch(384, 4)
    assert job.iteration_time(4) == pytest.approx(app.iteration_time((4,), atomic, accum))


def test_the_loader_gives_pollux_ncf_its_study_batch_on_one_gpu(apps) -> None:
    path = pollux_root() / "workloads" / "workload-1.csv"
    adaptive = load_pollux_adaptive(path, apps, "adaptive")
    tuned = load_pollux_adaptive(path, apps, "trace")
    assert len(adaptive.jobs) == len(tuned.jobs) == 160
    ncf = next(j for j in adaptive.jobs if j.spec.model == "ncf")
    assert ncf.spec.adaptive.fixed_batch == 32768 and ncf.spec.adaptive.max_gpus == 1
    other = next(j for j in adaptive.jobs if j.spec.model == "cifar10")
    assert other.spec.adaptive.fixed_batch is None and other.duration == other.spec.adaptive.target
    with pytest.raises(ValueError, match="batch must be"):
        load_pollux_adaptive(path, apps, "largest")
