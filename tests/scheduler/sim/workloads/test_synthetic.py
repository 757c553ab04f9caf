"""Synthetic workload: seeded, documented parameters honoured, bad ones refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.core.model import JobClass
from scheduler.sim.workloads.synthetic import SyntheticConfig, generate

SMALL = SyntheticConfig(jobs=600)


def test_same_seed_same_jobs_other_seed_other_jobs():
    a, b = generate(SMALL), generate(SMALL)
    assert a.jobs == b.jobs
    assert generate(replace(SMALL, seed=1)).jobs != a.jobs


def test_offered_load_is_exact_for_the_sample():
    for load in (0.6, 1.2):
        w = generate(replace(SMALL, load=load, diurnal_amplitude=0.0))
        work = sum(j.spec.num_gpus * j.duration for j in w.jobs)
        span = w.jobs[-1].spec.submit_time
        # Poisson arrivals: the realised span is within a few percent of n / rate.
        assert work / (SMALL.total_gpus * span) == pytest.approx(load, rel=0.1)


def test_load_changes_arrival_times_not_the_jobs():
    a = generate(SMALL)
    b = generate(replace(SMALL, load=0.7))
    assert [(j.spec.id, j.spec.num_gpus, j.duration, j.spec.job_class) for j in a.jobs] == [
        (j.spec.id, j.spec.num_gpus, j.duration, j.spec.job_class) for j in b.jobs
    ]
    assert a.jobs[-1].spec.submit_time < b.jobs[-1].spec.submit_time


def test_te_jobs_are_short_and_small_be_jobs_long_and_larger():
    w = generate(SyntheticConfig(jobs=3000, te_share=0.4))
    te = [j for j in w.jobs if j.spec.job_class is JobClass.TE]
    be = [j for j in w.jobs if j.spec.job_class is JobClass.BE]
    assert 0.37 < len(te) / len(w.jobs) < 0.43
    assert max(j.spec.num_gpus for j in te) <= 4
    assert max(j.duration for j in te) <= SMALL.te_duration_max
    assert min(j.duration for j in be) >= SMALL.be_duration_min
    assert sorted(j.duration for j in te)[len(te) // 2] < sorted(j.duration for j in be)[len(be) // 2] / 5
    assert sum(j.spec.num_gpus for j in te) / len(te) < sum(j.spec.num_gpus for j in be) / len(be)
    assert {j.spec.grace_period for j in w.jobs} <= set(SMALL.grace_choices)


def test_day_night_cycle_puts_more_arrivals_in_the_day():
    w = generate(SyntheticConfig(jobs=3000, diurnal_amplitude=0.8))
    day = sum(1 for j in w.jobs if 0.25 <= (j.spec.submit_time / 86400.0) % 1.0 < 0.75)
    assert day / len(w.jobs) > 0.65  # rate peaks at half a period, lowest at 0


def test_arrival_order_and_unique_ids():
    w = generate(SMALL)
    keys = [(j.spec.submit_time, j.spec.id) for j in w.jobs]
    assert keys == sorted(keys)
    assert len({j.spec.id for j in w.jobs}) == len(w.jobs)


def test_sizes_larger_than_the_cluster_are_not_generated():
    w = generate(replace(SMALL, nodes=1, gpus_per_node=4))
    assert w.max_gpus <= 4


@pytest.mark.parametrize(
    "field, value, fragment",
    [("load", -0.5, "load"), ("load", 0.0, "load"), ("te_share", 1.5, "te_share"), ("jobs", 0, "jobs"),
     ("diurnal_amplitude", 1.0, "diurnal_amplitude")],
)
def test_nonsense_parameters_are_refused_naming_the_field(field, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        SyntheticConfig(**{field: value})
