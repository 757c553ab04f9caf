"""TunedJobs durations against the study's own simulator: a job that never
waited finished, in the published run, in the time our world gives it."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from scheduler.sim.workloads.pollux import RESTART_SECONDS, load_pollux_tuned, packed, tuned_duration
from scheduler.sim.workloads.pollux_app import applications
from scheduler.sim.workloads.pollux_data import load_apps
from tests.scheduler.sim.workloads.pollux_traces import pollux_root


def test_packed_placement() -> None:
    assert packed(1) == (1,) and packed(4) == (4,) and packed(6) == (4, 2) and packed(16) == (4, 4, 4, 4)


def test_duration_is_the_restart_plus_each_epoch_at_its_goodput() -> None:
    app = applications(load_apps(pollux_root() / "apps"))["bert"]   # two epochs
    atomic, accum = app.fixed_batch(384, 8)
    by_hand = RESTART_SECONDS + sum(
        (app.progress_at(e + 1) - app.progress_at(e)) / app.goodput((4, 4), atomic, accum, e) for e in range(2))
    assert tuned_duration(app, 8, 384) == pytest.approx(by_hand)


@pytest.mark.parametrize("workload", ["workload-1", "workload-2"])
def test_published_jcts_are_never_shorter_and_the_quickest_match(workload: str) -> None:
    """Every published Tiresias+TunedJobs JCT is at least our duration (2 s
    of rounding), and per application with at least five jobs the quickest
    published job (one that hardly waited) is within 5 % of our duration
    for it. (imagenet has at most five jobs of 24-48 GPUs, demoted within
    the hour: every one of them waited in the published runs.)"""
    root = pollux_root()
    jobs = load_pollux_tuned(root / "workloads" / f"{workload}.csv").jobs
    published = json.loads((root / "published" / "tiresias-1.0.json").read_text())["jct_seconds"][workload]
    ratios: dict[str, list[float]] = defaultdict(list)
    for j in jobs:
        assert published[j.spec.id] >= j.duration - 2.0, j.spec.id
        ratios[j.spec.model].append(published[j.spec.id] / j.duration)
    checked = {app: min(r) for app, r in ratios.items() if len(r) >= 5}
    assert {"ncf", "cifar10", "bert"} <= set(checked)
    for app, ratio in checked.items():
        assert ratio <= 1.05, (app, ratio)
