"""Throughput, statistical efficiency and progress of the Pollux study's
applications, against values worked by hand from the CSV rows."""

from __future__ import annotations

import csv

import pytest

from scheduler.sim.workloads.pollux_app import Application, canonical_placement
from scheduler.sim.workloads.pollux_data import load_app
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


@pytest.fixture(scope="module")
def cifar10() -> Application:
    return Application(load_app(pollux_root() / "apps" / "cifar10"))


@pytest.fixture(scope="module")
def yolov3() -> Application:
    return Application(load_app(pollux_root() / "apps" / "yolov3"))


def test_measured_placement_is_read_and_interpolated_in_the_per_gpu_batch(cifar10) -> None:
    # placements.csv: "1,32,0.0427886962890625,0.0004995360016822816" and
    # "1,45,0.05048525333404541,0.000504022404551506".
    assert cifar10.throughput((1,), 32.0) == (0.0427886962890625, 0.0004995360016822816)
    step, sync = cifar10.throughput((1,), 38.5)
    assert step == pytest.approx((0.0427886962890625 + 0.05048525333404541) / 2)
    assert sync == pytest.approx((0.0004995360016822816 + 0.000504022404551506) / 2)


def test_a_placement_is_the_same_in_any_rotation(cifar10) -> None:
    assert canonical_placement((2, 1)) == canonical_placement((1, 2)) == (1, 2)
    assert canonical_placement((3, 0, 1)) == (1, 3)
    assert cifar10.throughput((2, 1), 64.0) == cifar10.throughput((1, 2), 64.0)


def test_unmeasured_placement_interpolates_the_scalability_runs(cifar10) -> None:
    # scalability.csv: "6,6,32,0.14090566635131835,0.09941204528808593";
    # six single-GPU nodes were not measured as a placement.
    step, sync = cifar10.throughput((1, 1, 1, 1, 1, 1), 32.0)
    assert step == pytest.approx(0.14090566635131835)
    assert sync == pytest.approx(0.09941204528808593)


def test_accumulation_adds_compute_but_not_synchronisation(cifar10) -> None:
    step, sync = cifar10.throughput((1,), 32.0)
    assert cifar10.iteration_time((1,), 32, 3) == pytest.approx(step + 3 * (step - sync))


def test_statistical_efficiency_from_the_gradient_noise(cifar10) -> None:
    # validation-256.csv, first epoch: grad_sqr 17.379458169870425,
    # grad_var 13.937760473946334; the smallest batch is 128, so scale 2.
    sqr, var = 17.379458169870425, 13.937760473946334
    gain = (var + sqr) / (var / 2 + sqr)
    assert cifar10.gain(256, 0) == pytest.approx(gain)
    assert cifar10.efficiency(256, 0) == pytest.approx(gain / 2)
    assert cifar10.efficiency(128, 0) == pytest.approx(1.0)
    # Between validated sizes the statistics are interpolated: 384 is half
    # way from 256 to 512 (validation-512.csv: 8.220063889732206, 8.914520446545186).
    sqr384, var384 = (sqr + 8.220063889732206) / 2, (var + 8.914520446545186) / 2
    assert cifar10.grad_stats(384, 0) == pytest.approx((sqr384, var384))
    assert cifar10.gain(384, 0) == pytest.approx((var384 + sqr384) / (var384 / 3 + sqr384))


def test_progress_of_an_epoch_is_the_least_any_run_recorded(cifar10) -> None:
    folder = pollux_root() / "apps" / "cifar10"
    runs = [list(csv.DictReader((folder / f"validation-{b}.csv").open())) for b in (128, 256, 512, 1024, 2048, 4096)]
    assert cifar10.progress_at(0) == 0.0
    assert cifar10.progress_at(1) == min(float(r[0]["progress"]) for r in runs)
    assert cifar10.max_epochs == 100
    assert cifar10.target_progress == min(float(r[99]["progress"]) for r in runs)


def test_goodput_is_gain_over_iteration_time(cifar10) -> None:
    expected = cifar10.gain(2 * 64, 5) / cifar10.iteration_time((2,), 64, 0)
    assert cifar10.goodput((2,), 64, 0, 5) == pytest.approx(expected)


def test_fixed_batch_splits_into_micro_batches(cifar10, yolov3) -> None:
    assert cifar10.fixed_batch(2048, 6) == (342, 0)      # ceil(2048/6) fits one micro-batch
    assert yolov3.fixed_batch(128, 2) == (8, 7)          # 64 per GPU, at most 8 at a time
    assert cifar10.fixed_batch(256, 1) == (128, 1)       # one GPU above the smallest batch accumulates


def test_out_of_range_queries_are_refused(cifar10) -> None:
    with pytest.raises(ValueError, match="outside the validated"):
        cifar10.gain(8192, 0)
    with pytest.raises(ValueError, match="outside the measured"):
        cifar10.throughput((1,), 4096.0)
